"""The control plane at N rows (10M by default), metadata only: no image bytes, so every figure is the cost of
planning and bookkeeping that a corpus of that size pays around its pixel work.

A Lance table of N metadata rows is made once (ids over four sources, sizes drawn from common camera/web
resolutions and a random tail, 2% failed rows, fingerprints with 3% planted copies, a `label_kind` with a score).
Each step then runs in its own process, which reports its wall time and its peak RSS (the baseline of an
interpreter with prx_nb imported is reported too):

- profile: `write_report`, what `prx_run` does (histograms, drop table, the per-row `rows.parquet`), streamed in
  batches of rows
- plan: `plan_buckets` (the MDS writer's plan: ids and positions per bucket)
- tree: an MDS tree of every planned row with 1-byte samples (the fixture: `MDSWriter` parts, then prx_nb's
  `merge_parts` for the bucket folders, manifests with fingerprints)
- dedup: `dedup_tree` over the tree's manifests (fingerprints there; nothing decoded)
- filter: `filter_tree` (text and nsfw labels as skip lists)
- optout: `optout` of 100,000 ids (ledger, record, skip lists)
- loader: `tree_dataset` set-up over the whole tree, and its first batch
- fetch: the writer's row fetch, a chunk of 256 rows, by `id IN (...)` filter and by `take` at planned positions

Usage: python bench/bench_control.py [--rows 10000000] [--work DIR] [--steps ...]
"""
import json, shutil, subprocess, sys, time
from pathlib import Path
import numpy as np, pyarrow as pa
from common import record, parser, RESULTS

STEPS = ['profile', 'plan', 'tree', 'dedup', 'filter', 'optout', 'loader', 'fetch']
SIZES = [(640, 480), (800, 600), (1024, 768), (1280, 720), (1920, 1080), (1080, 1080), (1080, 1350), (2048, 1536),
         (3000, 2000), (4000, 3000), (4032, 3024), (6000, 4000), (500, 375), (1200, 800), (1600, 1200), (2560, 1440)]


def peak_mb()->int:
    "This process's peak RSS in MB (VmHWM: its own, unlike `ru_maxrss`, which keeps the parent's peak across fork and exec)."
    line = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:'))
    return int(line.split()[1]) // 1024


def make_table(path:Path, n:int, seed:int=0):
    "N metadata rows in batches of 1M (the table is never whole in memory)."
    import lance
    rng = np.random.default_rng(seed)
    def batches():
        for s in range(0, n, 1_000_000):
            k = min(1_000_000, n - s)
            idx = np.arange(s, s + k)
            common = rng.random(k) < 0.7
            pick = rng.integers(len(SIZES), size=k)
            w = np.where(common, np.array([a for a, _ in SIZES])[pick], rng.integers(64, 8000, k))
            h = np.where(common, np.array([b for _, b in SIZES])[pick], rng.integers(64, 8000, k))
            flip = rng.random(k) < 0.3
            w, h = np.where(flip, h, w), np.where(flip, w, h)
            status = np.where(rng.random(k) < 0.02, 'truncated', 'ok')
            ph = rng.integers(-2**63, 2**63 - 1, k, dtype=np.int64)
            copy = (rng.random(k) < 0.03) & (idx > 0)
            ph[copy] = ph[rng.integers(0, k, copy.sum())]  # copies of other rows of the batch
            label = rng.choice(['visual', 'text', 'nsfw'], k, p=[0.9, 0.08, 0.02])
            src = np.array(['folder', 'parquet', 'wds', 'meta'])[idx % 4]
            yield pa.record_batch({
                'id': pa.array([f'{a}/img{i:09d}.jpg' for a, i in zip(src, idx)], pa.string()),
                'source': pa.array(src, pa.string()), 'status': pa.array(status, pa.string()),
                'width': pa.array(w, pa.int32()), 'height': pa.array(h, pa.int32()),
                'nbytes': pa.array(w.astype(np.int64) * h // 8, pa.int64()), 'phash': pa.array(ph, pa.int64()),
                'label_kind': pa.array(label, pa.string()), 'label_kind_score': pa.array(rng.uniform(0.5, 1, k), pa.float64())})
    it = batches()
    first = next(it)
    lance.write_dataset(pa.RecordBatchReader.from_batches(first.schema, (b for bs in ([first], it) for b in bs)), str(path), mode='overwrite',
                        max_rows_per_file=1 << 22)


def step(name:str, work:Path)->dict:
    "Run one step here; what it reports."
    import lance
    from prx_nb.bucket import Bucketer
    table, root = str(work / 'meta.lance'), work / 'tree'
    base = peak_mb()
    t = time.perf_counter()
    out = {}
    if name == 'profile':
        from prx_nb.profile import write_report
        drops = write_report(table, work / 'profile')
        out['rows'] = int(drops.loc['total', 'rows'])
    elif name == 'plan':
        from prx_nb.mds import plan_buckets
        plan = plan_buckets(table, Bucketer())
        out.update(buckets=len(plan), planned=sum(map(len, plan.values())))
    elif name == 'tree':
        out.update(make_tree(table, root))
    elif name == 'dedup':
        from prx_nb.dedup import dedup_tree
        r = dedup_tree(root, progress=False)
        out.update(samples=r.samples, skipped=r.total_skipped, groups=r.groups)
    elif name == 'filter':
        from prx_nb.skips import filter_tree
        r = filter_tree(root, table, 'label_kind', progress=False)
        out.update(skipped=int(r.buckets.skipped.sum()))
    elif name == 'optout':
        from prx_nb.skips import optout
        ids = lance.dataset(table).to_table(columns=['id'], filter="status = 'ok'", limit=100_000)['id'].to_pylist()
        t = time.perf_counter()
        r = optout(root, ids)
        out.update(ids=len(ids), skipped=sum(r.values()) if isinstance(r, dict) else None)
    elif name == 'loader':
        from prx_nb.loader import tree_dataset
        ds = tree_dataset(root, batch_size=64, reasons=None)
        out['setup_s'] = round(time.perf_counter() - t, 2)
        it = iter(ds)
        first = [next(it) for _ in range(64)]
        out.update(samples=ds.num_samples, streams=len(ds.streams), first_batch=len(first))
    elif name == 'fetch':
        out.update(fetch(table))
    out.update(seconds=round(time.perf_counter() - t, 2), peak_rss_mb=peak_mb(), baseline_rss_mb=base)
    return out


def make_tree(table:str, root:Path)->dict:
    "Every planned row as a 1-byte sample, written the way `write_bucket` writes: parts, then `merge_parts`."
    import lance, pyarrow.parquet as pq
    from streaming import MDSWriter
    from prx_nb.mds import plan_buckets, merge_parts, MDS_COLUMNS, _REJECTED
    from prx_nb.bucket import Bucketer
    shutil.rmtree(root, ignore_errors=True)
    ds = lance.dataset(table)
    plan, merge_s, n = plan_buckets(table, Bucketer()), 0.0, 0
    for key, rows in plan.items():
        tier, wh = key.split('/'); bw, bh = map(int, wh.split('x'))
        parts = []
        for s in range(0, len(rows), 1_000_000):
            part = root / (key + '.parts') / f'part.{s // 1_000_000:05d}'
            part.mkdir(parents=True)
            chunk = rows.slice(s, 1_000_000)
            meta = ds.take(chunk['_pos'].combine_chunks(), columns=['id', 'width', 'height', 'nbytes', 'phash'])
            with MDSWriter(out=str(part), columns=MDS_COLUMNS, size_limit=128 << 20, hashes=['sha1']) as w:
                for i in meta['id'].to_pylist(): w.write(dict(jpg=b'x', caption='c', width=bw, height=bh, id=i))
            m = pa.table({'id': meta['id'], 'lance_version': pa.array([ds.version] * len(meta), pa.int64()),
                          'src_width': meta['width'], 'src_height': meta['height'], 'src_nbytes': meta['nbytes'],
                          'phash': meta['phash']})
            pq.write_table(m, part / 'manifest.parquet'); pq.write_table(_REJECTED.empty_table(), part / 'rejected.parquet')
            (part / 'part.json').write_text('{}')
            parts.append(part); n += len(meta)
        t = time.perf_counter()
        merge_parts(parts, root / key, dict(bucket=key, table=table, made_by='bench_control'))
        merge_s += time.perf_counter() - t
        shutil.rmtree(root / (key + '.parts'))
    return dict(samples=n, buckets=len(plan), merge_s=round(merge_s, 2))


def fetch(table:str, chunks:int=20)->dict:
    "Seconds per chunk of 256 rows: `id IN (...)` filter vs `take` at positions."
    import lance
    from prx_nb.table import sql_in
    ds = lance.dataset(table)
    rng = np.random.default_rng(1)
    n = ds.count_rows()
    pos = [np.sort(rng.choice(n, 256, replace=False)) for _ in range(chunks)]
    ids = [ds.take(p, columns=['id'])['id'].to_pylist() for p in pos]
    t = time.perf_counter()
    for c in ids: ds.to_table(columns=['id', 'width', 'height'], filter=sql_in('id', c))
    t_in = (time.perf_counter() - t) / chunks
    t = time.perf_counter()
    for p in pos: ds.take(p, columns=['id', 'width', 'height'])
    t_take = (time.perf_counter() - t) / chunks
    return dict(in_filter_s_per_chunk=round(t_in, 4), take_s_per_chunk=round(t_take, 4), ratio=round(t_in / t_take, 1))


def main(rows:int, work:Path, steps:list, keep:bool=False)->dict:
    work.mkdir(parents=True, exist_ok=True)
    mark = work / f'meta.{rows}.done'
    if not mark.exists():
        for p in work.glob('meta.*.done'): p.unlink()
        t = time.perf_counter(); make_table(work / 'meta.lance', rows)
        print(f'table of {rows:,} rows: {time.perf_counter() - t:.0f} s', flush=True); mark.touch()
    old = RESULTS / 'control.json'
    res = json.loads(old.read_text())['steps'] if keep and old.exists() and json.loads(old.read_text())['rows'] == rows else {}
    for s in steps:
        r = subprocess.run([sys.executable, __file__, '--step', s, '--work', str(work)], capture_output=True, text=True)
        if r.returncode: raise SystemExit(f'step {s} failed:\n{r.stderr[-3000:]}')
        res[s] = json.loads(r.stdout.strip().splitlines()[-1])
        print(f'{s:8} {res[s]}', flush=True)
    return record('control', rows=rows, steps=res)


if __name__ == '__main__':
    p = parser(__doc__)
    p.add_argument('--rows', type=int, default=10_000_000)
    p.add_argument('--work', default='bench_out/control', help='the metadata table and the tree (about 1 GB at 10M rows)')
    p.add_argument('--steps', nargs='+', default=STEPS, choices=STEPS)
    p.add_argument('--step', default=None, help='(internal) run one step in this process')
    p.add_argument('--keep', action='store_true', help="keep the last record's figures of the steps not run now")
    a = p.parse_args()
    if a.step: print(json.dumps(step(a.step, Path(a.work))))
    else: main(a.rows, Path(a.work), a.steps, keep=a.keep)
