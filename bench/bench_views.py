"""Views (prx_nb.views) against rewritten trees: a view keeping 10%, 50% and 90% of a tree, read with
`tree_dataset(root, view=...)`, vs `tree_dataset` over the tree `export_view` writes with the same samples (and the
whole tree for reference). Same batch size, on_skip='drop', 2 DataLoader workers, bytes not decoded (the loader's own
cost); one full epoch each, set-up (reading the skip lists) included, runs interleaved, medians.

The tree: 512-tier buckets of real photos (the demo's photo cache, resized with Lanczos, JPEG q92), the image (MDS
jpeg) field, 32 MB shards; its table a Lance table of the ids and a uniform number `u` per sample, so that the
predicate `u < share` keeps that share of every bucket. Local disk, warm page cache: a view reads only the samples it
serves. (A remote tree is another matter: a view downloads every shard holding a sample it serves; recorded as
remote_bytes_ratio, the bytes of those shards over the export's.)
The crossover: the largest share at which the view is more than 10% slower than its export.
Usage: python bench/bench_views.py [--per-bucket N] [--repeat R] [--workers W]
"""
import gc, io, json, shutil, tempfile, time
from pathlib import Path
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from PIL import Image
from streaming import MDSWriter
from torch.utils.data import DataLoader
from common import record, parser
from prx_nb.demo import gather_photos
from prx_nb.mds import LEGACY_COLUMNS, migrate_tree
from prx_nb.views import create_view, export_view
from prx_nb.loader import tree_dataset

SIZES = [(512, 512), (576, 448), (448, 576), (640, 400), (592, 416), (672, 384), (544, 480), (480, 544)]
SHARES = (0.01, 0.02, 0.05, 0.1, 0.5, 0.9)  # the 10/50/90%, and below them, where a crossover would be


def make_tree(root, per_bucket, table):
    "A tree of 512-tier buckets of real photos, and a Lance table `table` of its ids with a uniform `u` each"
    import lance
    photos = sorted(p for p in gather_photos().iterdir() if p.suffix.lower() in ('.jpg', '.jpeg', '.png'))[:24]
    all_ids = []
    for w, h in SIZES:
        jpgs = []
        for p in photos:
            b = io.BytesIO(); Image.open(p).convert('RGB').resize((w, h), Image.LANCZOS).save(b, 'JPEG', quality=92)
            jpgs.append(b.getvalue())
        d = root / '512' / f'{w}x{h}'
        ids, shards, idx = [f'{w}x{h}/{i:06d}' for i in range(per_bucket)], [], []
        with MDSWriter(out=str(d), columns=LEGACY_COLUMNS, size_limit=32 << 20, hashes=['sha1']) as wr:
            for i, id_ in enumerate(ids): wr.write(dict(jpg=jpgs[i % len(jpgs)], caption=f'photo {i}', width=w, height=h, id=id_))
        for s in json.loads((d / 'index.json').read_text())['shards']:
            shards += [s['raw_data']['basename']] * s['samples']; idx += range(s['samples'])
        pq.write_table(pa.table({'id': ids, 'shard': shards, 'index': pa.array(idx, pa.int32())}), d / 'manifest.parquet')
        (d / 'bucket.json').write_text(json.dumps(dict(bucket=f'512/{w}x{h}', samples=per_bucket, caption_column='caption',
                                                       table=str(table))))
        all_ids += ids
    migrate_tree(root, progress=False)
    u = np.random.default_rng(0).random(len(all_ids))
    lance.write_dataset(pa.table({'id': all_ids, 'u': u}), str(table))
    return len(all_ids)


def shard_bytes(root, served_ids=None):
    "Bytes of the shards of a tree that hold at least one of `served_ids` (None: all): what a remote reader downloads"
    tot = 0
    for idx in root.glob('*/*/index.json'):
        man = pq.read_table(idx.parent / 'manifest.parquet', columns=['id', 'shard']).to_pylist()
        hit = {m['shard'] for m in man if served_ids is None or m['id'] in served_ids}
        tot += sum(s['raw_data']['bytes'] for s in json.loads(idx.read_text())['shards'] if s['raw_data']['basename'] in hit)
    return tot


def epoch(make, bs, workers):
    "(samples served, seconds) of building the dataset and one full epoch through a DataLoader"
    t = time.perf_counter()
    ds = make()
    dl = DataLoader(ds, batch_size=bs, num_workers=workers, collate_fn=list)
    n = sum(len(b) for b in dl)
    dt = time.perf_counter() - t
    del dl, ds; gc.collect()
    return n, dt


def main(per_bucket=1000, repeat=3, workers=2, bs=32):
    base = Path(tempfile.mkdtemp())
    try:
        root, table = base / 'tree', base / 'table.lance'
        n = make_tree(root, per_bucket, table)
        kw = dict(batch_size=bs, on_skip='drop', seed=1)
        res = dict(samples=n, buckets=len(SIZES), workers=workers, batch_size=bs, repeat=repeat, shares={})
        full = [epoch(lambda: tree_dataset(root, **kw), bs, workers) for _ in range(repeat)]
        res['full_tree_samples_per_s'] = round(float(np.median([k / t for k, t in full])))
        for share in SHARES:
            name = f'u{int(share * 100)}'
            t = time.perf_counter(); v = create_view(root, name, where=f'u < {share}', table=str(table), progress=False)
            made = time.perf_counter() - t
            t = time.perf_counter(); export_view(root, name, base / name, progress=False); exported = time.perf_counter() - t
            a, b = [], []
            for _ in range(repeat):  # interleaved, so drift hits both
                a.append(epoch(lambda: tree_dataset(root, view=name, **kw), bs, workers))
                b.append(epoch(lambda: tree_dataset(base / name, **kw), bs, workers))
            assert len({k for k, _ in a + b}) == 1, (a, b)  # the same samples (the last batch of a bucket padded alike)
            kept = {i for idx in (base / name).glob('*/*/manifest.parquet') for i in pq.read_table(idx, columns=['id'])['id'].to_pylist()}
            amp = shard_bytes(root, kept) / shard_bytes(base / name)  # a remote reader of the view downloads this many times the export's bytes
            va, vb = float(np.median([k / t for k, t in a])), float(np.median([k / t for k, t in b]))
            res['shares'][str(share)] = dict(served=v.served, kept_share=v.share, create_s=round(made, 2), export_s=round(exported, 2),
                                             view_runs=[round(k / t) for k, t in a], rewritten_runs=[round(k / t) for k, t in b],
                                             view_samples_per_s=round(va), rewritten_samples_per_s=round(vb),
                                             ratio=round(va / vb, 4), overhead=round(1 - va / vb, 4), remote_bytes_ratio=round(amp, 2))
            print(f'share {share:.0%}: view {va:,.0f} samples/s vs rewritten tree {vb:,.0f} samples/s -> ratio {va / vb:.3f} '
                  f'(overhead {1 - va / vb:.1%}); create {made:.1f} s, export {exported:.1f} s; a remote view downloads {amp:.1f}x the bytes')
            shutil.rmtree(base / name)
        over = {float(s): r['overhead'] for s, r in res['shares'].items()}
        slow = [s for s, o in over.items() if o > 0.10]
        res['crossover_share'] = max(slow) if slow else None  # at or below it the view costs more than 10%: export
        res['overhead_per_share'] = over
        print(f'views more than 10% slower than their export at kept shares {slow or "none measured"}')
        record('views', **res)
    finally: shutil.rmtree(base, ignore_errors=True)


if __name__ == '__main__':
    ap = parser(__doc__)
    ap.add_argument('--per-bucket', type=int, default=1000)
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--workers', type=int, default=2)
    a = ap.parse_args()
    main(per_bucket=a.per_bucket, repeat=a.repeat, workers=a.workers)
