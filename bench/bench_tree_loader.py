"""The tree loader (prx_nb.loader.tree_dataset, 10% of every bucket skipped) vs the stock streaming.StreamingDataset
with one Stream per bucket and batching_method='per_stream' (what a trainer would write by hand), on the same tree,
in one run: samples/s over full epochs with 2 DataLoader workers, without decoding (the loader's own cost) and with
JPEG decoding to tensors (torchvision decode_jpeg, the cost a trainer pays). Also: decode throughput of one worker,
and the floor of reading the shards (every sample's bytes straight from the shard files, no loader).

Samples are real photos (the demo's photo cache) resized with Lanczos to 512-tier buckets, JPEG q92.
Goal (issue 15): overhead <= 5% with and without decoding.
Layout (issue 30): the same shards read by tree_dataset under the legacy `jpg` (bytes) field and, after
`prx_migrate_mds` (index.json only), the `image` (MDS jpeg) field PRX reads: throughput within 5%.
Usage: python bench/bench_tree_loader.py [--per-bucket N] [--repeat R] [--workers W]
"""
import gc, json, os, shutil, tempfile, time
from pathlib import Path
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from PIL import Image
from streaming import MDSWriter, Stream, StreamingDataset
from torch.utils.data import DataLoader
from common import record, parser
from prx_nb.demo import gather_photos
from prx_nb.mds import LEGACY_COLUMNS, iter_bucket, migrate_tree
from prx_nb.tree import add_skips
from prx_nb.loader import tree_dataset, collate, decode_sample

SIZES = [(512, 512), (576, 448), (448, 576), (640, 400), (592, 416), (672, 384), (544, 480), (480, 544)]


def make_tree(root, per_bucket):
    "A tree of 512-tier buckets of real photos (q92), with a 10% `dedup` skip list over each shard"
    photos = sorted(p for p in gather_photos().iterdir() if p.suffix.lower() in ('.jpg', '.jpeg', '.png'))[:24]
    skipped, rng = 0, np.random.default_rng(0)
    for w, h in SIZES:
        import io
        jpgs = []
        for p in photos:
            b = io.BytesIO(); Image.open(p).convert('RGB').resize((w, h), Image.LANCZOS).save(b, 'JPEG', quality=92)
            jpgs.append(b.getvalue())
        d = root / '512' / f'{w}x{h}'
        ids, shards, idx = [], [], []
        with MDSWriter(out=str(d), columns=LEGACY_COLUMNS, size_limit=32 << 20) as wr:  # the layout before `image`
            for i in range(per_bucket):
                wr.write(dict(jpg=jpgs[i % len(jpgs)], caption=f'photo {i}', width=w, height=h, id=f'{w}x{h}/{i:06d}'))
                ids.append(f'{w}x{h}/{i:06d}')
        for s in json.loads((d / 'index.json').read_text())['shards']:
            shards += [s['raw_data']['basename']] * s['samples']; idx += range(s['samples'])
            k = s['samples']; sk = rng.choice(k, k // 10, replace=False).tolist()
            add_skips(d, s['raw_data']['basename'], 'dedup', indices=sk); skipped += len(sk)
        pq.write_table(pa.table({'id': ids, 'shard': shards, 'index': pa.array(idx, pa.int32())}), d / 'manifest.parquet')
        (d / 'bucket.json').write_text(json.dumps(dict(bucket=f'512/{w}x{h}', samples=per_bucket, caption_column='caption')))
    return skipped


def stock(root, bs):
    streams = [Stream(local=str(root / '512' / f'{w}x{h}')) for w, h in SIZES]
    return StreamingDataset(streams=streams, batch_size=bs, batching_method='per_stream', shuffle=True, shuffle_seed=1)


def epoch(make, bs, workers, decode):
    "samples/s of one full epoch through a DataLoader with `workers` workers"
    ds = make()
    if decode and not hasattr(ds, 'transform'):
        base = ds.get_item
        ds.get_item = lambda i, retry=7: decode_sample(base(i, retry))  # the same decode on the stock reader
    elif decode: ds.transform = decode_sample
    dl = DataLoader(ds, batch_size=bs, num_workers=workers, collate_fn=collate if decode else list)
    t = time.perf_counter(); n = sum(len(b['id']) if decode else len(b) for b in dl); dt = time.perf_counter() - t
    del dl, ds; gc.collect()
    return n / dt


def floor(root):
    "samples/s of reading every sample's bytes from the shard files, one process, no loader"
    t = time.perf_counter(); n = 0
    for w, h in SIZES:
        for s in iter_bucket(root / '512' / f'{w}x{h}'): n += len(s['image']) > 0
    return n / (time.perf_counter() - t)


def decode_rate(root, n=300):
    "JPEGs decoded to tensors per second, one process (what one worker can do)"
    xs = [s for _, s in zip(range(n), iter_bucket(root / '512' / '512x512'))]
    t = time.perf_counter()
    for x in xs: decode_sample(x)
    return n / (time.perf_counter() - t)


def main(per_bucket=2500, repeat=3, workers=2, bs=32):
    root = Path(tempfile.mkdtemp()) / 'tree'
    try:
        skipped = make_tree(root, per_bucket)
        n = per_bucket * len(SIZES)
        res = dict(samples=n, buckets=len(SIZES), skipped=skipped, skipped_share=round(skipped / n, 3), workers=workers,
                   batch_size=bs, read_floor_samples_per_s=round(floor(root)),
                   decode_per_worker_samples_per_s=round(decode_rate(root)))
        tree = lambda: tree_dataset(root, batch_size=bs, seed=1)
        for name, make in (('stock', lambda: stock(root, bs)), ('tree', tree)):  # building the dataset, once
            t = time.perf_counter(); ds = make(); res[f'{name}_setup_s'] = round(time.perf_counter() - t, 3); del ds; gc.collect()
        for decode in (False, True):
            a, b = [], []
            for _ in range(repeat):  # interleaved, so drift hits both
                a.append(epoch(lambda: stock(root, bs), bs, workers, decode)); b.append(epoch(tree, bs, workers, decode))
            p, s = float(np.median(a)), float(np.median(b))
            tag = 'decoded' if decode else 'bytes'
            res |= {f'{tag}_stock_runs': [round(x) for x in a], f'{tag}_tree_runs': [round(x) for x in b]}
            res |= {f'{tag}_stock_samples_per_s': round(p), f'{tag}_tree_samples_per_s': round(s),
                    f'{tag}_overhead': round(1 - s / p, 4), f'{tag}_goal_met': (1 - s / p) <= 0.05}
            print(f'{tag:>8}: stock per_stream StreamingDataset {p:,.0f} samples/s vs tree_dataset (10% skipped) '
                  f'{s:,.0f} samples/s -> overhead {1 - s / p:.1%} (ratio {s / p:.3f})')
        record('tree_loader', **res)
        new = root.parent / 'migrated'  # the same shard files (hard links), index.json given the image field
        shutil.copytree(root, new, copy_function=os.link)
        for p in new.rglob('index.json'): p.unlink(); shutil.copyfile(root / p.relative_to(new), p)  # its own copy: rewritten
        for p in new.rglob('bucket.json'): p.unlink(); shutil.copyfile(root / p.relative_to(new), p)
        migrate_tree(new, progress=False)
        lay = dict(samples=n, workers=workers, batch_size=bs)
        for decode in (False, True):
            a, b = [], []
            for _ in range(repeat):
                a.append(epoch(tree, bs, workers, decode)); b.append(epoch(lambda: tree_dataset(new, batch_size=bs, seed=1), bs, workers, decode))
            p, s = float(np.median(a)), float(np.median(b))
            tag = 'decoded' if decode else 'bytes'
            lay |= {f'{tag}_jpg_runs': [round(x) for x in a], f'{tag}_image_runs': [round(x) for x in b],
                    f'{tag}_jpg_samples_per_s': round(p), f'{tag}_image_samples_per_s': round(s),
                    f'{tag}_ratio': round(s / p, 4), f'{tag}_goal_met': s / p >= 0.95}
            print(f'{tag:>8}: tree_dataset, legacy jpg field {p:,.0f} samples/s vs image (jpeg) field {s:,.0f} samples/s '
                  f'-> ratio {s / p:.3f}')
        record('tree_loader_layout', **lay)
    finally: shutil.rmtree(root.parent, ignore_errors=True)


if __name__ == '__main__':
    ap = parser(__doc__)
    ap.add_argument('--per-bucket', type=int, default=2500)
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--workers', type=int, default=2)
    a = ap.parse_args()
    main(per_bucket=a.per_bucket, repeat=a.repeat, workers=a.workers)
