"""Loader throughput with a 10% skip list (prx_nb.loader.SkipStreamingDataset) vs the plain streaming.StreamingDataset
on the same shards, in one run: samples/s over full epochs, shuffled, one process.

Goal (issue 3): overhead <= 5%.
Usage: python bench/bench_loader.py [--samples N] [--repeat R]
"""
import gc, shutil, tempfile, time
from pathlib import Path
import numpy as np
from streaming import MDSWriter, StreamingDataset
from common import record, parser
from prx_nb.testing import tiny_image
from prx_nb.mds import MDS_COLUMNS
from prx_nb.tree import add_skips
from prx_nb.loader import SkipStreamingDataset


def make_bucket(d, n):
    "One MDS bucket of `n` samples (16 KB-ish JPEGs, 8 MB shards), and a 10% `dedup` skip list over it."
    jpgs = [tiny_image(256 + i, 192, quality=90) for i in range(16)]
    with MDSWriter(out=str(d), columns=MDS_COLUMNS, size_limit=8 << 20) as w:
        for i in range(n): w.write(dict(jpg=jpgs[i % 16], caption=f'sample {i}', width=512, height=512, id=f's/{i:07d}'))
    rng, per = np.random.default_rng(0), {}
    import json
    for s in json.loads((d / 'index.json').read_text())['shards']:
        k = s['samples']; per[s['raw_data']['basename']] = rng.choice(k, k // 10, replace=False).tolist()
    for shard, idx in per.items(): add_skips(d, shard, 'dedup', indices=idx)
    return sum(map(len, per.values()))


def epoch(cls, d, **kw):
    ds = cls(local=str(d), batch_size=64, shuffle=True, shuffle_seed=1, **kw)
    t = time.perf_counter(); n = sum(1 for _ in ds); dt = time.perf_counter() - t
    del ds; gc.collect()
    return n / dt


def main(samples=50_000, repeat=3):
    d = Path(tempfile.mkdtemp()) / 'bucket'
    try:
        skipped = make_bucket(d, samples)
        plain, skip = [], []
        for _ in range(repeat):  # interleaved, so drift hits both
            plain.append(epoch(StreamingDataset, d)); skip.append(epoch(SkipStreamingDataset, d))
        p, s = float(np.median(plain)), float(np.median(skip))
        res = dict(samples=samples, skipped=skipped, skipped_share=round(skipped / samples, 3), plain_samples_per_s=round(p),
                   skip_samples_per_s=round(s), overhead=round(1 - s / p, 4), goal_met=(1 - s / p) <= 0.05)
        print(f'plain StreamingDataset {p:,.0f} samples/s vs SkipStreamingDataset (10% skipped) {s:,.0f} samples/s -> overhead {1 - s / p:.1%}')
        record('loader', **res)
    finally: shutil.rmtree(d.parent, ignore_errors=True)


if __name__ == '__main__':
    ap = parser(__doc__)
    ap.add_argument('--samples', type=int, default=50_000)
    ap.add_argument('--repeat', type=int, default=3)
    main(**vars(ap.parse_args()))
