"""Ingest (read + header probe, no decode) vs fully decoding the same files with Pillow, one core, same run.

Goal (issue 2): ingest excluding the Lance write costs under a quarter of the decode.
Usage: python bench/bench_ingest_decode.py [--repeat N]
"""
import io, tempfile, time
from pathlib import Path
from PIL import Image
from common import timed, record, parser
from prx_nb.demo import gather_photos
from prx_nb.ingest import make_row, ingest


def main(repeat=3):
    files = sorted(p for p in gather_photos().iterdir() if p.suffix != '.json')
    high = [p for p in files if p.name.startswith('lomiri')]
    def probe(fs): return [make_row('b', p.name, p.read_bytes()) for p in fs]
    def decode(fs):
        for p in fs:
            with Image.open(io.BytesIO(p.read_bytes())) as im: im.load()
    res = {}
    for label, fs in (('all_photos', files), ('wallpapers_3_to_16MP', high)):
        tp, _ = timed(lambda: probe(fs), repeat); td, _ = timed(lambda: decode(fs), repeat)
        res[label] = dict(files=len(fs), megapixels=round(sum(r['width'] * r['height'] for r in probe(fs)) / 1e6, 1),
                          ingest_ms_per_image=round(tp / len(fs) * 1e3, 3), decode_ms_per_image=round(td / len(fs) * 1e3, 3),
                          ingest_over_decode=round(tp / td, 4))
        print(f'{label}: ingest (read + probe) {tp:.3f}s, Pillow full decode {td:.3f}s -> ingest costs {tp / td:.1%} of decode '
              f'({td / tp:.0f}x cheaper)')
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / 'photos'; src.mkdir()
        for p in files: (src / p.name).write_bytes(p.read_bytes())
        t = time.perf_counter(); ingest(Path(d) / 't.lance', [f'folder:{src}'], progress=False); tw = time.perf_counter() - t
    res['full_ingest_with_lance_write_s'] = round(tw, 3)
    res['goal_met'] = all(v['ingest_over_decode'] < 0.25 for k, v in res.items() if isinstance(v, dict))
    record('ingest_decode', **res)


if __name__ == '__main__':
    ap = parser(__doc__)
    ap.add_argument('--repeat', type=int, default=3, help='timed repetitions (median is reported)')
    main(**vars(ap.parse_args()))
