"""Single-process vs Ray Data ingest of the same input, in one run.

The input is a folder of N real photos (the photo cache, linked under distinct names, so the bytes are real JPEG/PNG
files of 0.01-16 MP). Ray's start-up is timed separately from the ingest itself.
Usage: python bench/bench_ray_ingest.py [--files N] [--workers W]
"""
import os, shutil, tempfile, time
from pathlib import Path
import lance
from common import record, parser
from prx_nb.demo import gather_photos
from prx_nb.ingest import ingest


def main(files=3000, workers=2):
    photos = sorted(p for p in gather_photos().iterdir() if p.suffix != '.json')
    d = Path(tempfile.mkdtemp())
    try:
        src = d / 'src'; src.mkdir()
        for i in range(files): os.link(photos[i % len(photos)], src / f'{i:06d}_{photos[i % len(photos)].name}')
        t = time.perf_counter(); s1 = ingest(d / 'local.lance', [f'folder:{src}'], progress=False); tl = time.perf_counter() - t
        import ray
        t = time.perf_counter(); ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False); tr0 = time.perf_counter() - t
        t = time.perf_counter(); s2 = ingest(d / 'ray.lance', [f'folder:{src}'], engine='ray'); tr = time.perf_counter() - t
        a, b = (lance.dataset(str(d / n)).to_table(columns=['id', 'status', 'width', 'height', 'nbytes']).sort_by('id') for n in ('local.lance', 'ray.lance'))
        assert a.equals(b) and s1.n_added == s2.n_added == files
        gb = sum(p.stat().st_size for p in src.iterdir()) / 1e9
        res = dict(files=files, gigabytes=round(gb, 2), workers=workers, local_s=round(tl, 2), ray_start_s=round(tr0, 2), ray_s=round(tr, 2),
                   local_images_per_s=round(files / tl), ray_images_per_s=round(files / tr), ray_speedup=round(tl / tr, 2))
        print(f'local {tl:.2f}s vs Ray Data ({workers} workers) {tr:.2f}s (+{tr0:.1f}s start) -> {tl / tr:.2f}x')
        record('ray_ingest', **res)
    finally: shutil.rmtree(d, ignore_errors=True)


if __name__ == '__main__':
    ap = parser(__doc__)
    ap.add_argument('--files', type=int, default=3000)
    ap.add_argument('--workers', type=int, default=2)
    main(**vars(ap.parse_args()))
