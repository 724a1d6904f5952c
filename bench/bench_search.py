"""Search at scale: prx_nb's full-text and vector search (Lance indices, through `prx_nb.explore.search`) against
the peers a user would otherwise reach for, on a synthetic table of --rows rows (captions of ~100 words drawn with
a Zipf law from a 50,000-word vocabulary, 512-d embeddings around 1,000 cluster centres):

- full text: p50/p95 latency of top-20 queries (rare, mid-frequency and common words, and two-word AND queries)
  vs a DuckDB `ILIKE '%word%' LIMIT 20` over the same column loaded into a native DuckDB table;
- vectors: p50/p95 latency and recall@10 of top-10 queries vs exact brute force in NumPy (the whole matrix in
  memory, one matrix-vector product per query);
- the index build times.

    python bench/bench_search.py               # 1M rows (about 10 minutes and 5 GB of disk on 2 cores)
    python bench/bench_search.py --rows 100000 # quicker
"""
import shutil, sys, time
from pathlib import Path
import numpy as np, pyarrow as pa
sys.path.insert(0, str(Path(__file__).parent))
from common import parser, record


def words(n, rng):
    "n distinct pronounceable pseudo-words."
    syl = [c + v for c in 'bcdfghjklmnprstvz' for v in 'aeiou']
    out = set()
    while len(out) < n: out.add(''.join(rng.choice(syl, rng.integers(2, 4))))
    return sorted(out, key=lambda w: (len(w), w))


def build(path, rows, dim, rng, batch=100_000):
    import lance
    vocab = np.array(words(50_000, rng))
    p = 1 / np.arange(1, len(vocab) + 1); p /= p.sum()                     # Zipf: rank r drawn ∝ 1/r
    centres = rng.normal(size=(1000, dim)).astype('float32')
    def batches():
        for s in range(0, rows, batch):
            n = min(batch, rows - s)
            idx = rng.choice(len(vocab), size=(n, 100), p=p)
            caps = [' '.join(r) for r in vocab[idx]]
            v = centres[rng.integers(0, 1000, n)] + rng.normal(size=(n, dim)).astype('float32')
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            yield pa.record_batch({'id': pa.array([f'row{i:08d}' for i in range(s, s + n)]), 'source': pa.array(['synthetic'] * n),
                                   'status': pa.array(['ok'] * n), 'width': pa.array(np.full(n, 1024, 'int32')),
                                   'height': pa.array(np.full(n, 768, 'int32')), 'caption_source': pa.array(caps),
                                   'embedding': pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), dim)})
    first = next(b := batches())
    lance.write_dataset(pa.Table.from_batches([first]), path, mode='create')
    for x in b: lance.write_dataset(pa.Table.from_batches([x]), path, mode='append')
    return vocab


def pct(ts): return dict(p50_ms=round(float(np.percentile(ts, 50)) * 1e3, 3), p95_ms=round(float(np.percentile(ts, 95)) * 1e3, 3))


def main():
    ap = parser(__doc__)
    ap.add_argument('--rows', type=int, default=1_000_000); ap.add_argument('--dim', type=int, default=512)
    ap.add_argument('--queries', type=int, default=20, help='queries per class'); ap.add_argument('--work', default='/tmp/prx_bench_search')
    ap.add_argument('--keep', action='store_true', help='keep the table (and reuse it on the next run with --keep)')
    a = ap.parse_args()
    import duckdb, lance
    from prx_nb.explore import index_table, search
    rng = np.random.default_rng(0)
    work = Path(a.work); table = str(work / 'search.lance')
    reuse = a.keep and (work / 'build.json').exists()
    if reuse:
        import json
        b = json.loads((work / 'build.json').read_text()); t_build, t_fts, t_ivf = b['build'], b['fts'], b['ivf']
        vocab = np.array(words(50_000, rng)); st = index_table(table)
    else:
        shutil.rmtree(work, ignore_errors=True); work.mkdir(parents=True)
        t = time.perf_counter(); vocab = build(table, a.rows, a.dim, rng); t_build = time.perf_counter() - t
        t = time.perf_counter(); index_table(table, vectors=[]); t_fts = time.perf_counter() - t           # FTS (with positions) + id B-tree
        t = time.perf_counter(); st = index_table(table, min_ann_rows=1); t_ivf = time.perf_counter() - t  # + IVF_SQ on the embeddings
        if a.keep:
            import json
            (work / 'build.json').write_text(json.dumps(dict(build=t_build, fts=t_fts, ivf=t_ivf)))
    print(f'table: {a.rows:,} rows in {t_build:.0f} s' + (' (reused)' if reuse else ''))
    print(st.to_string(index=False)); print(f'index build: text {t_fts:.1f} s, vectors {t_ivf:.1f} s')

    # ---- full text vs DuckDB ILIKE
    con = duckdb.connect()
    arrow_caps = lance.dataset(table).to_table(columns=['id', 'caption_source'])
    con.register('caps', arrow_caps); con.execute('CREATE TABLE t AS SELECT * FROM caps'); con.unregister('caps'); del arrow_caps
    classes = {'common word (rank 1-20)': (0, 20), 'mid word (rank 1k-5k)': (1000, 5000), 'rare word (rank 20k-50k)': (20_000, 50_000)}
    qs = {c: [vocab[i] for i in rng.integers(lo, hi, a.queries)] for c, (lo, hi) in classes.items()}
    qs['two words, AND (mid + mid)'] = [f'+{vocab[rng.integers(1000, 5000)]} +{vocab[rng.integers(1000, 5000)]}' for _ in range(a.queries)]
    qs['absent word'] = [w + 'xq' for w in vocab[rng.integers(0, 50_000, a.queries)]]
    fts, pooled_ours, pooled_peer = {}, [], []
    for c, queries in qs.items():
        search(table, text=queries[0], k=20)                                        # warm
        ours, peer, hits = [], [], []
        for q in queries:                                                          # each side runs its queries back to back
            t = time.perf_counter(); r = search(table, text=q, k=20); ours.append(time.perf_counter() - t); hits.append(len(r))
        for q in queries:
            terms = [w.lstrip('+') for w in q.split()]
            sql = 'SELECT id FROM t WHERE ' + ' AND '.join(f"caption_source ILIKE '%{w}%'" for w in terms) + ' LIMIT 20'
            t = time.perf_counter(); con.execute(sql).fetchall(); peer.append(time.perf_counter() - t)
        fts[c] = dict(prx_nb=pct(ours), duckdb_ilike=pct(peer), speedup_p50=round(float(np.median(peer) / np.median(ours)), 1),
                      mean_hits=float(np.mean(hits)))
        pooled_ours += ours; pooled_peer += peer
        print(c, fts[c])
    fts['all queries pooled'] = dict(prx_nb=pct(pooled_ours), duckdb_ilike=pct(pooled_peer),
                                     speedup_p50=round(float(np.median(pooled_peer) / np.median(pooled_ours)), 1),
                                     speedup_p95=round(float(np.percentile(pooled_peer, 95) / np.percentile(pooled_ours, 95)), 1))
    print('pooled', fts['all queries pooled'])
    all_ours = [v['prx_nb']['p50_ms'] for v in fts.values()]
    del con

    # ---- vectors vs exact NumPy
    ds = lance.dataset(table)
    mat = np.stack(ds.to_table(columns=['embedding']).column('embedding').combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(-1, a.dim))
    ids = np.array(ds.to_table(columns=['id']).column('id').to_pylist())
    nq = 100
    qv = mat[rng.integers(0, len(mat), nq)] + rng.normal(scale=0.02, size=(nq, a.dim)).astype('float32')
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    search(table, vector=qv[0], k=10)                                              # warm
    ours, peer, exact, found = [], [], [], []
    for q in qv:
        t = time.perf_counter(); exact.append(np.argpartition(-(mat @ q), 10)[:10]); peer.append(time.perf_counter() - t)
    for q in qv:
        t = time.perf_counter(); r = search(table, vector=q, k=10); ours.append(time.perf_counter() - t); found.append(set(r.id))
    recall = [len(f & set(ids[e])) / 10 for f, e in zip(found, exact)]
    vec = dict(prx_nb=pct(ours), numpy_exact=pct(peer), speedup_p50=round(float(np.median(peer) / np.median(ours)), 1),
               recall_at_10=round(float(np.mean(recall)), 4), index='IVF_SQ, cosine, sqrt(n) partitions, nprobes 20, refine 5')
    print('vectors', vec)
    record('search', rows=a.rows, dim=a.dim, queries_per_class=a.queries, table_build_s=round(t_build, 1),
           index_build_s=dict(text_fts_with_positions_and_id_btree=round(t_fts, 1), vector_ivf_sq=round(t_ivf, 1)),
           full_text=fts, vectors=vec, fts_p50_ms_range=[min(all_ours), max(all_ours)])
    if not a.keep: shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
