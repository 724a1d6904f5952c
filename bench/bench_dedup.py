"""Perceptual-hash dedup: speed of prx_nb's fingerprint vs imagehash.phash on the same files (one core each, in one run),
the floor (merely decoding each file as reduced as prx_nb does), precision/recall on the full-size labelled duplicate set
for prx_nb, imagehash and imagededup, and the scale of the dedup itself on 10M synthetic fingerprints (time, peak memory).

Goal (issue 4): >= 2x imagehash's images/s; 10M fingerprints in bounded memory.
Usage: python bench/bench_dedup.py [--repeat N] [--n N]
"""
import gc, io, resource, time
import numpy as np
from PIL import Image
from common import timed, record, parser
from prx_nb.phash import luma_thumbnail, phash_many, labelled_copies, pair_truth, precision_recall
from prx_nb.dedup import dedup_keep
from prx_nb.core import probe_image
from prx_nb.demo import gather_photos


def floor_decode(data):
    "Decode only, as reduced as prx_nb's luma_thumbnail does (JPEG: luma at the same DCT scale; others: full)."
    for d in data:
        im = Image.open(io.BytesIO(d))
        if im.format == 'JPEG' and im.mode in ('RGB', 'L'): im.draft('L', (128, 128))
        im.load()


def speed(name, data, repeat):
    import imagehash
    ours, _ = timed(lambda: phash_many(data), repeat)
    peer, _ = timed(lambda: [imagehash.phash(Image.open(io.BytesIO(d))) for d in data], repeat)
    floor, _ = timed(lambda: floor_decode(data), repeat)
    res = dict(images=len(data), prx_images_per_s=round(len(data) / ours, 1), imagehash_images_per_s=round(len(data) / peer, 1),
               speedup=round(peer / ours, 2), reduced_decode_images_per_s=round(len(data) / floor, 1), prx_over_floor=round(ours / floor, 2))
    print(f"{name}: prx_nb {res['prx_images_per_s']} img/s vs imagehash {res['imagehash_images_per_s']} img/s -> {res['speedup']}x; "
          f"prx_nb takes {res['prx_over_floor']}x the time of the reduced decode alone")
    return res


def quality(files):
    import imagehash
    from imagededup.methods import PHash
    items = labelled_copies(files)
    i, j, truth = pair_truth(items)
    as_int = lambda hexes: np.array([int(str(x), 16) for x in hexes], np.uint64).view(np.int64)
    idd = PHash(verbose=False)
    hashes = dict(prx_nb=phash_many([x['data'] for x in items])[0],
                  imagehash=as_int(imagehash.phash(Image.open(io.BytesIO(x['data']))) for x in items),
                  imagededup=as_int(idd.encode_image(image_array=np.asarray(Image.open(io.BytesIO(x['data'])).convert('RGB'))) for x in items))
    out = {m: precision_recall(h, i, j, truth=truth) for m, h in hashes.items()}
    for m, rows in out.items(): print(m, ' '.join(f"r={r['radius']}: P {r['precision']:.3f} R {r['recall']:.3f}" for r in rows))
    return dict(images=len(items), pairs=len(i), true_pairs=int(truth.sum()), by_method=out)


def scale(n):
    "Dedup of `n` synthetic fingerprints (a tenth of them copies of another) at distance 0: seconds and peak memory."
    rng = np.random.default_rng(0)
    h = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)
    dup = rng.choice(n, n // 10, replace=False); h[dup] = h[rng.integers(0, n, n // 10)]
    px, nb, rank = rng.integers(1, 20_000_000, n), rng.integers(1, 10_000_000, n), np.arange(n)
    gc.collect(); before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter(); keep, _ = dedup_keep(h, px, nb, rank=rank); dt = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    inputs_mb = (h.nbytes + px.nbytes + nb.nbytes + rank.nbytes) / 2**20
    res = dict(fingerprints=n, kept=int(keep.sum()), expected_kept=len(np.unique(h)), seconds=round(dt, 2), inputs_mb=round(inputs_mb),
               peak_rss_mb=round(peak / 1024), rss_growth_mb=round((peak - before) / 1024))
    print(f"dedup of {n:,} fingerprints: {dt:.1f} s, peak RSS {res['peak_rss_mb']} MB (inputs {res['inputs_mb']} MB), kept {res['kept']:,}")
    return res


def main(repeat=3, n=10_000_000):
    files = sorted(p for p in gather_photos().iterdir() if p.suffix != '.json')
    data = [p.read_bytes() for p in files]
    walls = [p.read_bytes() for p in files if p.name.startswith('lomiri')]
    res = dict(all_photos=speed('all photos', data, repeat), wallpapers=speed('wallpapers (1.5-16 MP)', walls, repeat))
    res['labelled_set'] = quality(files)
    res['scale'] = scale(n)
    res['goal_met'] = res['all_photos']['speedup'] >= 2 and res['wallpapers']['speedup'] >= 2 and res['scale']['kept'] == res['scale']['expected_kept']
    record('dedup', **res)


if __name__ == '__main__':
    ap = parser(__doc__)
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--n', type=int, default=10_000_000)
    main(**vars(ap.parse_args()))
