"""Search at scale: prx_nb's full-text and vector search (Lance indices, through `prx_nb.explore.search`) against
the peers a user would otherwise reach for, on a synthetic table of --rows rows (captions of ~100 words drawn with
a Zipf law from a 50,000-word vocabulary, 512-d embeddings around 1,000 cluster centres):

- full text: p50/p95 latency of top-20 queries (rare, mid-frequency and common words, and two-word AND queries)
  vs the ranked peer a user would pick, Tantivy (its Python bindings: BM25 top-20 over an on-disk index of the same
  captions, ids fetched), with the overlap of the two top-20 lists; prx_nb is timed as users call it (id and
  caption, a DataFrame) and returning only ids as Arrow (the Tantivy side's output); and, for
  reference, a DuckDB `ILIKE '%word%' LIMIT 20` over the same column in a native DuckDB table (not the same work:
  it stops after 20 arbitrary hits, unranked);
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


def tantivy_index(path:Path, table:str, threads:int=2):
    "A Tantivy index of the table's (id, caption_source), on disk at `path`: id stored raw, caption tokenized, with positions."
    import lance, tantivy
    sb = tantivy.SchemaBuilder()
    sb.add_text_field('id', stored=True, tokenizer_name='raw'); sb.add_text_field('caption', stored=False)
    path.mkdir(parents=True, exist_ok=True)
    ix = tantivy.Index(sb.build(), path=str(path))
    w = ix.writer(heap_size=512_000_000, num_threads=threads)
    for b in lance.dataset(table).to_batches(columns=['id', 'caption_source'], batch_size=50_000):
        for i, c in zip(b.column(0).to_pylist(), b.column(1).to_pylist()): w.add_document(tantivy.Document(id=i, caption=c))
    w.commit(); w.wait_merging_threads(); ix.reload()
    return ix


def tantivy_top(ix, q:str, k:int=20)->list:
    "BM25 top-k ids: `+a +b` is an AND of two terms, as in prx_nb's query syntax."
    se = ix.searcher()
    return [se.doc(a)['id'][0] for _, a in se.search(ix.parse_query(q, ['caption']), k).hits]


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

    # ---- full text vs Tantivy (BM25, ranked) and DuckDB ILIKE (unranked, first 20 hits)
    t = time.perf_counter(); tix = tantivy_index(work / 'tantivy', table); t_tantivy = time.perf_counter() - t
    print(f'tantivy index: {t_tantivy:.1f} s')
    con = duckdb.connect()
    arrow_caps = lance.dataset(table).to_table(columns=['id', 'caption_source'])
    con.register('caps', arrow_caps); con.execute('CREATE TABLE t AS SELECT * FROM caps'); con.unregister('caps'); del arrow_caps
    classes = {'common word (rank 1-20)': (0, 20), 'mid word (rank 1k-5k)': (1000, 5000), 'rare word (rank 20k-50k)': (20_000, 50_000)}
    qs = {c: [vocab[i] for i in rng.integers(lo, hi, a.queries)] for c, (lo, hi) in classes.items()}
    qs['two words, AND (mid + mid)'] = [f'+{vocab[rng.integers(1000, 5000)]} +{vocab[rng.integers(1000, 5000)]}' for _ in range(a.queries)]
    qs['absent word'] = [w + 'xq' for w in vocab[rng.integers(0, 50_000, a.queries)]]
    fts, pooled_ours, pooled_peer, pooled_tan, pooled_ids = {}, [], [], [], []
    for c, queries in qs.items():
        search(table, text=queries[0], k=20); tantivy_top(tix, queries[0])       # warm
        ours, peer, hits, tan, overlap = [], [], [], [], []
        for q in queries:                                                          # each side runs its queries back to back
            t = time.perf_counter(); r = search(table, text=q, k=20); ours.append(time.perf_counter() - t); hits.append(len(r))
            overlap.append(set(r.id))
        ids_only = []                                                              # the Tantivy side's output: ids, Arrow
        for q in queries:
            t = time.perf_counter(); search(table, text=q, k=20, columns=['id'], arrow=True); ids_only.append(time.perf_counter() - t)
        for i, q in enumerate(queries):
            t = time.perf_counter(); top = tantivy_top(tix, q); tan.append(time.perf_counter() - t)
            overlap[i] = len(overlap[i] & set(top)) / max(len(top), len(overlap[i]), 1) if (top or overlap[i]) else 1.0
        for q in queries:
            terms = [w.lstrip('+') for w in q.split()]
            sql = 'SELECT id FROM t WHERE ' + ' AND '.join(f"caption_source ILIKE '%{w}%'" for w in terms) + ' LIMIT 20'
            t = time.perf_counter(); con.execute(sql).fetchall(); peer.append(time.perf_counter() - t)
        fts[c] = dict(prx_nb=pct(ours), prx_nb_ids_only=pct(ids_only), tantivy_bm25=pct(tan), duckdb_ilike=pct(peer),
                      tantivy_over_prx_nb_p50=round(float(np.median(tan) / np.median(ours)), 3),
                      tantivy_over_prx_nb_p95=round(float(np.percentile(tan, 95) / np.percentile(ours, 95)), 3),
                      speedup_p50=round(float(np.median(peer) / np.median(ours)), 1),
                      top20_overlap_with_tantivy=round(float(np.mean(overlap)), 3), mean_hits=float(np.mean(hits)))
        pooled_ours += ours; pooled_peer += peer; pooled_tan += tan; pooled_ids += ids_only
        print(c, fts[c])
    fts['all queries pooled'] = dict(prx_nb=pct(pooled_ours), prx_nb_ids_only=pct(pooled_ids), tantivy_bm25=pct(pooled_tan), duckdb_ilike=pct(pooled_peer),
                                     tantivy_over_prx_nb_p50=round(float(np.median(pooled_tan) / np.median(pooled_ours)), 3),
                                     tantivy_over_prx_nb_p95=round(float(np.percentile(pooled_tan, 95) / np.percentile(pooled_ours, 95)), 3),
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
           index_build_s=dict(text_fts_with_positions_and_id_btree=round(t_fts, 1), vector_ivf_sq=round(t_ivf, 1),
                              tantivy_text=round(t_tantivy, 1)),
           full_text=fts, vectors=vec, fts_p50_ms_range=[min(all_ours), max(all_ours)])
    if not a.keep: shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
