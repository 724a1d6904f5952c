"""Bucket + Lanczos resize + JPEG q92 encode of the real photos: prx_nb's Bucketer vs img2dataset's Resizer
configured to the same output sizes with Lanczos, one core each, in one run; and two physical floors that include the
output: decoding each source in full plus encoding its bucket-sized result at q92 (libjpeg-turbo, the same planar
encoder and 4:2:0 planes prx_nb writes), and the same with the source decoded at the DCT-reduced scale prx_nb's own
decode asks for (the least decoding any Lanczos resize to that size can do). Merely decoding is reported too.

img2dataset 1.47 pins opencv-python-headless<5 and pulls wandb and albumentations, so it lives in its own
environment, bench/.peer (made on first use: python3.11 -m venv bench/.peer && bench/.peer/bin/pip install
img2dataset==1.47.0). The peer resizes to the bucket's cover size (short side = the cover's short side); prx_nb also
centre-crops to the bucket, which the peer does not do (prx_nb resizes only the region the crop keeps).
prx_nb is measured twice: its default planar path (Lanczos on YCbCr planes, chroma at half resolution, libjpeg-turbo's planar
encoder) and its RGB reference path (Bucketer(planar=False): Lanczos on RGB, Pillow encodes).
Goal (issue 3): >= 1.3x the peer's throughput.
Usage: python bench/bench_bucket.py [--repeat N]
"""
import io, json, math, subprocess
import numpy as np, simplejpeg
from pathlib import Path
from PIL import Image
from common import timed, record, parser
from prx_nb.bucket import Bucketer, cover_size
from prx_nb.demo import gather_photos

PEER = Path(__file__).parent / '.peer' / 'bin' / 'python'


def peer_env():
    if not PEER.exists():
        subprocess.run(['python3.11', '-m', 'venv', str(PEER.parent.parent)], check=True)
        subprocess.run([str(PEER.parent / 'pip'), 'install', '-q', 'img2dataset==1.47.0'], check=True)
    return PEER


def run_config(name, bucketer, files, repeat):
    rgb = Bucketer(tiers=bucketer.tiers, planar=False)
    jobs = []
    for p in files:
        r, _ = bucketer.render(p.read_bytes())
        if r.ok: jobs.append((p, min(cover_size(r.src_width, r.src_height, r.width, bh=r.height))))
    data = [p.read_bytes() for p, _ in jobs]
    ours, _ = timed(lambda: [bucketer(b) for b in data], repeat)
    ours_rgb, _ = timed(lambda: [rgb(b) for b in data], repeat)
    def decode():
        for b in data:
            with Image.open(io.BytesIO(b)) as im: im.load()
    floor, _ = timed(decode, repeat)
    planes, drafts = [], []                                                         # the outputs, as the encoder gets them
    for b in data:
        r, px = bucketer.render(b); planes.append(tuple(np.ascontiguousarray(np.asarray(c)) for c in (px.y, px.cb, px.cr)))
        cw, ch = cover_size(r.src_width, r.src_height, r.width, bh=r.height)
        drafts.append((math.ceil(cw * bucketer.oversample), math.ceil(ch * bucketer.oversample)) if bucketer.oversample else None)
    def floor_io(reduced):
        for b, (y, cb, cr), d in zip(data, planes, drafts):
            with Image.open(io.BytesIO(b)) as im:
                if reduced and d: im.draft('RGB', d)
                im.load()
            simplejpeg.encode_jpeg_yuv_planes(y, cb, cr, quality=bucketer.quality)
    floor_full, _ = timed(lambda: floor_io(False), repeat)
    floor_reduced, _ = timed(lambda: floor_io(True), repeat)
    out = subprocess.run([str(peer_env()), str(Path(__file__).parent / 'peer_img2dataset.py')], capture_output=True, text=True, check=True,
                         input=json.dumps(dict(files=[[str(p), s] for p, s in jobs], repeat=repeat)), env={'NO_ALBUMENTATIONS_UPDATE': '1', 'OMP_NUM_THREADS': '1'})
    peer = json.loads(out.stdout.strip().splitlines()[-1])
    mp = sum(Image.open(p).size[0] * Image.open(p).size[1] for p, _ in jobs) / 1e6
    res = dict(images=len(jobs), source_megapixels=round(mp, 1), prx_images_per_s=round(len(jobs) / ours, 2),
               img2dataset_images_per_s=round(len(jobs) / peer['resize_s'], 2), speedup=round(peer['resize_s'] / ours, 2),
               prx_rgb_path_images_per_s=round(len(jobs) / ours_rgb, 2), rgb_path_speedup=round(peer['resize_s'] / ours_rgb, 2),
               pillow_full_decode_s=round(floor, 3), cv2_full_decode_s=round(peer['decode_s'], 3), prx_s=round(ours, 3),
               prx_over_full_decode=round(ours / floor, 2),
               floor_full_decode_plus_encode_s=round(floor_full, 3), prx_over_floor_full=round(ours / floor_full, 2),
               floor_reduced_decode_plus_encode_s=round(floor_reduced, 3), prx_over_floor_reduced=round(ours / floor_reduced, 2))
    print(f"{name}: prx_nb {res['prx_images_per_s']} img/s (RGB path {res['prx_rgb_path_images_per_s']}) vs img2dataset "
          f"{res['img2dataset_images_per_s']} img/s -> {res['speedup']}x (RGB path {res['rgb_path_speedup']}x); "
          f"prx_nb takes {res['prx_over_floor_full']}x the floor (full decode + q92 encode), "
          f"{res['prx_over_floor_reduced']}x the reduced floor (DCT-reduced decode + encode)")
    return res


def main(repeat=3):
    files = sorted(p for p in gather_photos().iterdir() if p.suffix != '.json')
    walls = [p for p in files if p.name.startswith('lomiri')]
    res = dict(all_photos_default_tiers=run_config('all photos, tiers 512-4096', Bucketer(), files, repeat),
               wallpapers_default_tiers=run_config('wallpapers, tiers 512-4096', Bucketer(), walls, repeat),
               wallpapers_tier_512=run_config('wallpapers, tier 512 only', Bucketer(tiers=(512,)), walls, repeat))
    res['goal_met'] = all(v['speedup'] >= 1.3 for v in res.values())
    record('bucket', **res)


if __name__ == '__main__':
    ap = parser(__doc__)
    ap.add_argument('--repeat', type=int, default=3)
    main(**vars(ap.parse_args()))
