"""The control plane at 10M, 30M and 100M rows, metadata only: no image bytes, so every figure is the cost of planning and
bookkeeping that a corpus of that size pays around its pixel work. Goal (issue 34): peak RSS of every step <= 4 GB at
100M rows and <= 1.1x its 10M figure; time per row within +-20% of its 10M figure.

A Lance table of N metadata rows is made once per size (ids over four sources, sizes drawn from common camera/web
resolutions and a random tail, 2% failed rows, fingerprints with 3% planted copies, a `label_kind` with a score), then
the fixture: every planned row as a 1-byte sample in parts of 1M rows (`MDSWriter`, manifests with fingerprints).
Each step then runs in its own process, which reports its wall time and its peak RSS (VmHWM; the baseline of an
interpreter with prx_nb imported is reported too):

- profile: `write_report`, what `prx_run` does (histograms, drop table, the per-row `rows.parquet`), streamed
- plan: `plan_buckets` (the MDS writer's plan: ids and positions per bucket), streamed to Parquet and sorted by DuckDB
- merge: `merge_parts` of every bucket (shards linked, the manifest written a part at a time)
- dedup: `dedup_tree` over the tree's manifests (fingerprints there; ranked in DuckDB, spilling past its memory limit)
- filter: `filter_tree` (text and nsfw labels as skip lists; labels and manifests joined in DuckDB)
- optout: `optout` of 100,000 ids (ledger, record, skip lists; manifests read a batch at a time)
- loader: `tree_dataset` set-up over the whole tree, and its first batch; beside it `loader_stock`, a stock
  `StreamingDataset` over the same streams (Mosaic's own cost, the floor)
- fetch: the writer's row fetch, a chunk of 256 rows, by `id IN (...)` filter and by `take` at planned positions

With --peer (at 10M), the in-memory path of commit af665bc (`plan_buckets`, `merge_parts`, `dedup_tree`,
`filter_tree`, `skip_ids`) runs too, each in its own process, and the outputs are compared: the plan's ids and
positions per bucket, the merged manifests, and every dedup, filter and opt-out skip list, which must be equal.

Usage: python bench/bench_control.py [--rows 10000000 30000000 100000000] [--work DIR] [--steps ...] [--peer]
"""
import json, shutil, subprocess, sys, time
from pathlib import Path
import numpy as np, pyarrow as pa
from common import record, parser, RESULTS

STEPS = ['profile', 'plan', 'merge', 'dedup', 'filter', 'optout', 'loader', 'loader_stock', 'fetch']
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


PEER_COMMIT = 'af665bc'  # the last commit whose control plane held the corpus in memory
PEER_STEPS = ['plan', 'merge', 'dedup', 'filter', 'optout']


def peer(module:str):
    "prx_nb.`module` as it was at PEER_COMMIT (the in-memory path), loaded from git beside today's package."
    import importlib.util
    here = Path(__file__).parent
    dst = here / '.peer' / f'inmem_{module}.py'
    if not dst.exists():
        dst.parent.mkdir(exist_ok=True)
        src = subprocess.run(['git', 'show', f'{PEER_COMMIT}:prx_nb/{module}.py'], cwd=here.parent, capture_output=True, text=True, check=True).stdout
        dst.write_text(src.replace('from .', 'from prx_nb.'))
    spec = importlib.util.spec_from_file_location(f'inmem_{module}', dst)
    m = sys.modules[spec.name] = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    return m


def optout_ids(table:str)->list:
    import lance
    return lance.dataset(table).to_table(columns=['id'], filter="status = 'ok'", limit=100_000)['id'].to_pylist()


def step(name:str, work:Path)->dict:
    "Run one step here (`NAME_peer`: the in-memory path of PEER_COMMIT); what it reports."
    from prx_nb.bucket import Bucketer
    table, root = str(work / 'meta.lance'), work / 'tree'
    name, inmem = name.removesuffix('_peer'), name.endswith('_peer')
    base = peak_mb()
    t = time.perf_counter()
    out = {}
    if name == 'profile':
        from prx_nb.profile import write_report
        drops = write_report(table, work / 'profile')
        out['rows'] = int(drops.loc['total', 'rows'])
    elif name == 'plan' and inmem:
        import pyarrow.parquet as pq
        plan = peer('mds').plan_buckets(table, Bucketer())
        out.update(buckets=len(plan), planned=sum(map(len, plan.values())), seconds=round(time.perf_counter() - t, 2))
        shutil.rmtree(work / 'plan_peer', ignore_errors=True); (work / 'plan_peer').mkdir()
        for i, (k, rows) in enumerate(plan.items()): pq.write_table(rows.replace_schema_metadata({'key': k}), work / 'plan_peer' / f'{i}.parquet')
    elif name == 'plan':
        from prx_nb.mds import plan_buckets
        plan = plan_buckets(table, Bucketer(), folder=work / 'plan')
        out.update(buckets=len(plan), planned=sum(map(len, plan.values())))
        (work / 'plan' / 'keys.json').write_text(json.dumps({k: r.name for k, r in plan.items()}))
    elif name == 'merge':
        out.update(merge_tree(table, root, peer('mds').merge_parts if inmem else None, root.with_name('tree_peer') if inmem else root))
    elif name == 'dedup':
        from prx_nb.dedup import dedup_tree
        r = (peer('dedup').dedup_tree if inmem else dedup_tree)(root, progress=False)
        out.update(samples=r.samples, skipped=r.total_skipped, groups=r.groups)
    elif name == 'filter':
        from prx_nb.skips import filter_tree
        r = (peer('skips').filter_tree if inmem else filter_tree)(root, table, 'label_kind', progress=False)
        out.update(skipped=int(r.buckets.skipped.sum()))
    elif name == 'optout':
        from prx_nb.skips import optout
        ids = optout_ids(table)
        t = time.perf_counter()
        if inmem: r = peer('skips').skip_ids(root, 'optout', ids)
        else: r = optout(root, ids)
        out.update(ids=len(ids), skipped=sum(v for k, v in r.items() if k != 'not_found'))
    elif name == 'loader':
        from prx_nb.loader import tree_dataset
        ds = tree_dataset(root, batch_size=64, reasons=None)
        out['setup_s'] = round(time.perf_counter() - t, 2); out['setup_peak_rss_mb'] = peak_mb()
        it = iter(ds)
        first = [next(it) for _ in range(64)]
        out.update(samples=ds.num_samples, skipped=ds.num_skipped, streams=len(ds.streams), first_batch=len(first))
    elif name == 'loader_stock':
        from streaming import Stream, StreamingDataset
        from prx_nb.tree import iter_buckets
        streams = [Stream(local=str(b)) for b in iter_buckets(root)]
        ds = StreamingDataset(streams=streams, batch_size=64)
        out['setup_s'] = round(time.perf_counter() - t, 2); out['setup_peak_rss_mb'] = peak_mb()
        it = iter(ds)
        first = [next(it) for _ in range(64)]
        out.update(samples=ds.num_samples, streams=len(ds.streams), first_batch=len(first))
    elif name == 'fetch':
        out.update(fetch(table))
    out.setdefault('seconds', round(time.perf_counter() - t, 2))
    out.update(peak_rss_mb=peak_mb(), baseline_rss_mb=base)
    return out


def make_parts(table:str, root:Path)->dict:
    "The fixture: every planned row as a 1-byte sample in parts of 1M rows, written the way `write_part` writes (`MDSWriter`, a manifest with fingerprints); kept beside the tree so that the merge can be run again."
    import lance, pyarrow.parquet as pq
    from streaming import MDSWriter
    from prx_nb.mds import plan_buckets, MDS_COLUMNS
    from prx_nb.bucket import Bucketer
    done = root / 'parts.done'
    if done.exists(): return json.loads(done.read_text())
    shutil.rmtree(root, ignore_errors=True)
    ds = lance.dataset(table)
    plan, n = plan_buckets(table, Bucketer()), 0
    rejected = pa.schema([('id', pa.string()), ('status', pa.string()), ('reason', pa.string())])
    for key, rows in plan.items():
        tier, wh = key.split('/'); bw, bh = map(int, wh.split('x'))
        for s in range(0, len(rows), 1_000_000):
            part = root / (key + '.parts') / f'part.{s // 1_000_000:05d}'
            part.mkdir(parents=True)
            chunk = rows.slice(s, 1_000_000).read()
            meta = ds.take(chunk['_pos'].combine_chunks(), columns=['id', 'width', 'height', 'nbytes', 'phash'])
            with MDSWriter(out=str(part), columns=MDS_COLUMNS | dict(image='bytes'), size_limit=128 << 20, hashes=['sha1']) as w:
                for i, sw, sh in zip(*(meta[c].to_pylist() for c in ('id', 'width', 'height'))):
                    w.write(dict(image=b'x', caption='c', width=bw, height=bh, original_width=sw, original_height=sh, id=i))
            m = pa.table({'id': meta['id'], 'lance_version': pa.array([ds.version] * len(meta), pa.int64()),
                          'src_width': meta['width'], 'src_height': meta['height'], 'src_nbytes': meta['nbytes'],
                          'phash': meta['phash']})
            pq.write_table(m, part / 'manifest.parquet'); pq.write_table(rejected.empty_table(), part / 'rejected.parquet')
            (part / 'part.json').write_text('{}')
            n += len(meta)
    info = dict(samples=n, buckets=len(plan))
    done.write_text(json.dumps(info))
    return info


def merge_tree(table:str, root:Path, merge=None, into:Path|None=None)->dict:
    "Every bucket merged from its parts by `merge` (prx_nb's `merge_parts`) into `into` (the tree the other steps read)."
    from prx_nb.mds import merge_parts
    merge, into, n, keys = merge or merge_parts, into or root, 0, []
    for pdir in sorted(root.glob('*/*.parts')):
        key = f'{pdir.parent.name}/{pdir.name[:-len(".parts")]}'
        shutil.rmtree(into / key, ignore_errors=True); (into / key).parent.mkdir(parents=True, exist_ok=True)
        r = merge(sorted(pdir.glob('part.*')), into / key, dict(bucket=key, table=table, made_by='bench_control'))
        n += r.written; keys.append(key)
    return dict(samples=n, buckets=len(keys))


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


def lists(root:Path, reason:str)->dict:
    "(bucket, shard) → the indices of `reason`'s skip list, over the whole tree."
    from prx_nb.tree import iter_buckets, bucket_key, read_skips
    return {(bucket_key(b), sh): sorted(v) for b in iter_buckets(root) for sh, v in read_skips(b, [reason]).items() if v}


def clear(root:Path, reason:str):
    "Remove `reason`'s skip lists (and, for opt-outs, the record and the ledger), so that the next run starts from none."
    from prx_nb.tree import skip_files, remove_sidecar, ledger_path, OPTOUT
    for p, sh, r in skip_files(root):
        if r == reason: remove_sidecar(p.parent, sh, r)
    if reason == 'optout':
        (root / OPTOUT).unlink(missing_ok=True)
        ledger_path(str(root.parent / 'meta.lance')).unlink(missing_ok=True)


def same_plan(work:Path)->bool:
    import pyarrow.parquet as pq
    new = json.loads((work / 'plan' / 'keys.json').read_text())
    old = {pq.read_schema(p).metadata[b'key'].decode(): p for p in (work / 'plan_peer').glob('*.parquet')}
    def same(a, b): return all(a[c].equals(b[c]) for c in ('id', '_pos'))  # values (DuckDB marks the columns not null)
    return sorted(new) == sorted(old) and all(same(pq.read_table(work / 'plan' / new[k]), pq.read_table(old[k])) for k in new)


def same_tree(root:Path, other:Path)->bool:
    import pyarrow.parquet as pq
    from prx_nb.tree import iter_buckets, bucket_key
    a, b = list(iter_buckets(root)), list(iter_buckets(other))
    return [bucket_key(x) for x in a] == [bucket_key(x) for x in b] and all(
        pq.read_table(x / 'manifest.parquet').equals(pq.read_table(y / 'manifest.parquet')) and
        (x / 'index.json').read_text() == (y / 'index.json').read_text() for x, y in zip(a, b))


def run_step(s:str, work:Path)->dict:
    r = subprocess.run([sys.executable, __file__, '--step', s, '--work', str(work)], capture_output=True, text=True)
    if r.returncode: raise SystemExit(f'step {s} failed:\n{r.stderr[-3000:]}')
    out = json.loads(r.stdout.strip().splitlines()[-1])
    print(f'{work.name:>10} {s:13} {out}', flush=True)
    return out


def compare(work:Path)->dict:
    "The in-memory path and today's over the same tree, each in its own process; whether each output is equal."
    root, res, eq = work / 'tree', {}, {}
    res['plan'], res['plan_peer'] = run_step('plan', work), run_step('plan_peer', work)
    eq['plan'] = same_plan(work)
    res['merge_peer'] = run_step('merge_peer', work)
    eq['merge'] = same_tree(root, root.with_name('tree_peer')); shutil.rmtree(root.with_name('tree_peer'))
    for s, reasons in (('dedup', ['dedup']), ('filter', ['text', 'nsfw']), ('optout', ['optout'])):
        for r in reasons: clear(root, r)
        res[f'{s}_peer'] = run_step(f'{s}_peer', work)
        old = {r: lists(root, r) for r in reasons}
        for r in reasons: clear(root, r)
        res[s] = run_step(s, work)
        eq[s] = all(lists(root, r) == old[r] for r in reasons) and res[s]['skipped'] == res[f'{s}_peer']['skipped']
    return dict(steps=res, equal=eq)


def extrapolate(sizes:dict)->dict:
    "Per step: the 1B-row figure from the two largest sizes, linear in rows (seconds; peak RSS above the baseline)."
    ns = sorted(sizes, key=int)
    if len(ns) < 2: return {}
    a, b = sizes[ns[-2]]['steps'], sizes[ns[-1]]['steps']
    na, nb, out = int(ns[-2]), int(ns[-1]), {}
    for k in b:
        if k not in a or 'peak_rss_mb' not in b[k]: continue
        f = lambda x, y: y + (y - x) * (1e9 - nb) / (nb - na)
        out[k] = dict(seconds=round(f(a[k]['seconds'], b[k]['seconds'])), peak_rss_mb=round(max(f(a[k]['peak_rss_mb'], b[k]['peak_rss_mb']), b[k]['peak_rss_mb'])))
    return out


def main(sizes:list, work:Path, steps:list, with_peer:bool=False)->dict:
    old = RESULTS / 'control.json'
    res = json.loads(old.read_text()) if old.exists() else {}
    res = res.get('sizes', {}) if 'sizes' in res else {}
    for rows in sizes:
        w = work / str(rows)
        w.mkdir(parents=True, exist_ok=True)
        if not (w / f'meta.{rows}.done').exists():
            t = time.perf_counter(); make_table(w / 'meta.lance', rows)
            print(f'table of {rows:,} rows: {time.perf_counter() - t:.0f} s', flush=True); (w / f'meta.{rows}.done').touch()
        t = time.perf_counter(); info = make_parts(str(w / 'meta.lance'), w / 'tree')
        print(f'fixture: {info} ({time.perf_counter() - t:.0f} s)', flush=True)
        if not (w / 'tree' / 'merged.done').exists():
            run_step('merge', w); (w / 'tree' / 'merged.done').touch()
        cur = res.setdefault(str(rows), {}).setdefault('steps', {})
        for s in steps:
            if s in ('dedup', 'filter', 'optout'):
                for r in {'dedup': ['dedup'], 'filter': ['text', 'nsfw'], 'optout': ['optout']}[s]: clear(w / 'tree', r)
            cur[s] = run_step(s, w)
        if with_peer:
            c = compare(w)
            res[str(rows)]['peer'] = {k: v for k, v in c['steps'].items() if k.endswith('_peer')}
            res[str(rows)]['equal'] = c['equal']
            print('equal outputs:', c['equal'], flush=True)
    ns = sorted(res, key=int)
    small, big = res[ns[0]]['steps'], res[ns[-1]]['steps']
    ratio = {k: dict(rss=round(big[k]['peak_rss_mb'] / small[k]['peak_rss_mb'], 2),
                     time_per_row=round(big[k]['seconds'] / int(ns[-1]) / (small[k]['seconds'] / int(ns[0])), 2))
             for k in big if k in small and small[k].get('seconds')}
    return record('control', sizes=res, ratio_largest_to_smallest=ratio, extrapolated_1b=extrapolate(res), peer_commit=PEER_COMMIT,
                  goal=dict(peak_rss_mb_at_100m=4096, rss_ratio=1.1, time_per_row=[0.8, 1.2]))


if __name__ == '__main__':
    p = parser(__doc__)
    p.add_argument('--rows', type=int, nargs='+', default=[10_000_000, 30_000_000, 100_000_000])
    p.add_argument('--work', default='bench_out/control', help='the tables and trees, one folder per size (about 12 GB at 100M rows)')
    p.add_argument('--steps', nargs='+', default=STEPS, choices=STEPS + ['loader_stock'])
    p.add_argument('--peer', action='store_true', help='also run the in-memory path of PEER_COMMIT and compare the outputs')
    p.add_argument('--step', default=None, help='(internal) run one step in this process')
    a = p.parse_args()
    if a.step: print(json.dumps(step(a.step, Path(a.work))))
    else: main(a.rows, Path(a.work).resolve(), a.steps, with_peer=a.peer)
