"""The post's fragmentation lesson at this machine's scale: one ~1M-row metadata table written at 1k rows per
fragment vs the same table compacted by `prx_nb.table.compact`; a selective filter and a count-by-group on both.

Goal (issue 2): the compacted table answers at least 10x faster.
Usage: python bench/bench_fragments.py [--rows N] [--rows-per-fragment K] [--repeat R]
"""
import shutil, tempfile
from pathlib import Path
import lance, numpy as np, pyarrow as pa
from common import timed, record, parser
from prx_nb.ingest import SCHEMA
from prx_nb.table import compact, fragment_health
from prx_nb.profile import duckdb_connection


def metadata_table(n, seed=0):
    "A synthetic metadata-only table in the ingest schema (no image bytes), deterministic."
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 8, n); w = rng.integers(200, 4000, n); h = rng.integers(200, 4000, n)
    words = np.array('a photo of the red blue dog cat city street sky tree house car on in with'.split())
    caps = [' '.join(x) for x in words[rng.integers(0, len(words), (n, 6))]]
    cols = dict(id=[f's{s}/{i:08d}' for i, s in enumerate(src)], source=[f's{s}' for s in src], key=[f'{i:08d}' for i in range(n)],
                image=pa.nulls(n, pa.large_binary()), uri=[f's3://bucket/{i:08d}.jpg' for i in range(n)], width=w.astype('int32'),
                height=h.astype('int32'), format=['JPEG'] * n, mode=['RGB'] * n, orientation=np.ones(n, 'int8'),
                nbytes=(w * h // 8).astype('int64'), status=np.where(rng.random(n) < .97, 'ok', 'truncated'),
                reason=[''] * n, caption_source=caps)
    return pa.table(cols, schema=SCHEMA)


def _same(a, b):
    "Same answer from both tables (a filtered table, a count, or group rows in any order)."
    if isinstance(a, pa.Table): return a.num_rows == b.num_rows
    return sorted(a) == sorted(b) if isinstance(a, list) else a == b


def main(rows=1_000_000, rows_per_fragment=1000, repeat=5):
    d = Path(tempfile.mkdtemp())
    try:
        t = metadata_table(rows)
        frag = str(d / 'fragmented.lance'); lance.write_dataset(t, frag, max_rows_per_file=rows_per_fragment)
        comp = str(d / 'compacted.lance'); shutil.copytree(frag, comp)
        (tc, _) = timed(lambda: compact(comp), 1)
        res = dict(rows=rows, compaction_s=round(tc, 2))
        for name, path in (('fragmented', frag), ('compacted', comp)):
            res[name] = dict(fragments=fragment_health(lance.dataset(path)).fragments)
        queries = {
            'selective_filter': lambda p: lance.dataset(p).to_table(columns=['id', 'width'], filter="width = 1234 AND source = 's3'"),
            'filtered_count': lambda p: lance.dataset(p).count_rows("status = 'truncated' AND width > 3000"),
            'count_by_group': lambda p: duckdb_connection(p).sql("SELECT source, status, count(*) FROM t GROUP BY ALL").fetchall(),
        }
        for q, fn in queries.items():
            a, b = fn(frag), fn(comp)
            assert _same(a, b), f'{q}: the two tables disagree'
            tf, _ = timed(lambda: fn(frag), repeat); tcq, _ = timed(lambda: fn(comp), repeat)
            res[q] = dict(fragmented_ms=round(tf * 1e3, 1), compacted_ms=round(tcq * 1e3, 1), speedup=round(tf / tcq, 1))
            print(f"{q}: fragmented {tf*1e3:.1f} ms vs compacted {tcq*1e3:.1f} ms -> {tf/tcq:.1f}x")
        res['goal_met'] = all(res[q]['speedup'] >= 10 for q in queries)
        record('fragments', **res)
    finally: shutil.rmtree(d, ignore_errors=True)


if __name__ == '__main__':
    ap = parser(__doc__)
    ap.add_argument('--rows', type=int, default=1_000_000)
    ap.add_argument('--rows-per-fragment', type=int, default=1000)
    ap.add_argument('--repeat', type=int, default=5)
    main(**vars(ap.parse_args()))
