"""The control plane out of core: the bucket plan, the merge, dedup, filter and opt-outs give what the in-memory
computation gives (the same decisions written out in numpy here), over a metadata tree with deleted rows, planted
copies, opted-out best copies and labels with and without a score; spill folders of killed runs are swept."""
import json, os
from pathlib import Path
import lance, numpy as np, pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
import pytest
from streaming import MDSWriter
from prx_nb.bucket import Bucketer
from prx_nb.mds import plan_buckets, merge_parts, MDS_COLUMNS
from prx_nb.dedup import dedup_tree, dedup_keep, tree_fingerprints
from prx_nb.skips import filter_tree, optout, skip_ids
from prx_nb.tree import iter_buckets, bucket_key, read_skips, skips_by_id, sweep_tmp, read_optouts

SIZES = [(640, 480), (1024, 768), (1920, 1080), (1080, 1350), (4000, 3000), (500, 375), (2560, 1440), (300, 200)]


def make_table(path:Path, n:int=3000, seed:int=0)->str:
    "n metadata rows over several fragments, some deleted, with copies, labels and scores (some null)."
    rng = np.random.default_rng(seed)
    pick = rng.integers(len(SIZES), size=n)
    w, h = np.array([a for a, _ in SIZES])[pick], np.array([b for _, b in SIZES])[pick]
    ph = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)
    copy = rng.random(n) < 0.2
    ph[copy] = ph[rng.integers(0, 50, copy.sum())]  # many copies of 50 fingerprints, across buckets
    ph[5] ^= 1; ph[6] = ph[5] ^ 3  # near copies (2 bits apart) for the radius
    score = rng.uniform(0.3, 1, n)
    t = pa.table({'id': [f's{i % 3}/img{(i * 7919) % n:06d}.jpg' for i in range(n)],  # not in id order
                  'status': np.where(rng.random(n) < 0.03, 'truncated', 'ok'),
                  'width': pa.array(w, pa.int32()), 'height': pa.array(h, pa.int32()),
                  'nbytes': pa.array(rng.integers(1000, 10**6, n), pa.int64()), 'phash': pa.array(ph, pa.int64()),
                  'label_kind': rng.choice(['visual', 'text', 'nsfw', None], n, p=[0.7, 0.15, 0.1, 0.05]),
                  'label_kind_score': pa.array(np.where(rng.random(n) < 0.1, np.nan, score), pa.float64(), from_pandas=True)})
    lance.write_dataset(t, str(path), max_rows_per_file=700)
    ds = lance.dataset(str(path))
    ds.delete("id LIKE '%3.jpg'")  # deletions in every fragment: positions skip them
    return str(path)


def reference_plan(table:str, where=None, exclude=())->dict:
    "The plan computed whole in memory: every live row's scan position, its bucket, sorted by id."
    ds = lance.dataset(table)
    t = ds.to_table(columns=['id', 'status', 'width', 'height'])
    t = t.append_column('_pos', pa.array(np.arange(t.num_rows), pa.int64()))
    ok = t.filter(pc.equal(t['status'], 'ok'))
    if where: ok = ok.filter(pc.is_in(ok['id'], value_set=ds.to_table(columns=['id'], filter=where)['id']))
    ok = ok.filter(pc.invert(pc.is_in(ok['id'], value_set=pa.array(sorted(exclude), pa.string()))))
    tier, bw, bh, _ = Bucketer().assign_many(ok['width'].to_numpy().astype(np.int64), ok['height'].to_numpy().astype(np.int64))
    out = {}
    for i, (a, b, c) in enumerate(zip(tier.tolist(), bw.tolist(), bh.tolist())):
        if a: out.setdefault(f'{a}/{b}x{c}', []).append((ok['id'][i].as_py(), ok['_pos'][i].as_py()))
    return {k: sorted(v) for k, v in sorted(out.items())}


def make_tree(table:str, root:Path)->Path:
    "Every planned row as a tiny sample, two parts per bucket, merged by prx_nb."
    ds = lance.dataset(table)
    for key, rows in plan_buckets(table, Bucketer()).items():
        parts = []
        for n, s in enumerate(range(0, len(rows), max(1, len(rows) // 2 + 1))):
            part = root / (key + '.parts') / f'part.{n:05d}'
            chunk = rows.slice(s, len(rows) // 2 + 1).read()
            meta = ds.take(chunk['_pos'].combine_chunks(), columns=['id', 'width', 'height', 'nbytes', 'phash'])
            with MDSWriter(out=str(part), columns=MDS_COLUMNS | dict(image='bytes'), size_limit=1 << 12) as w:  # several shards
                for i, a, b in zip(*(meta[c].to_pylist() for c in ('id', 'width', 'height'))):
                    w.write(dict(image=b'x', caption='c', width=a, height=b, original_width=a, original_height=b, id=i))
            pq.write_table(pa.table({'id': meta['id'], 'lance_version': pa.array([ds.version] * len(meta), pa.int64()),
                                     'src_width': meta['width'], 'src_height': meta['height'], 'src_nbytes': meta['nbytes'],
                                     'phash': meta['phash']}), part / 'manifest.parquet')
            pq.write_table(pa.schema([('id', pa.string()), ('status', pa.string()), ('reason', pa.string())]).empty_table(), part / 'rejected.parquet')
            (part / 'part.json').write_text('{}')
            parts.append(part)
        merge_parts(parts, root / key, dict(bucket=key, table=table))
    return root


def samples(root:Path)->pa.Table:
    return pa.concat_tables([pq.read_table(b / 'manifest.parquet').append_column('bucket', pa.array([bucket_key(b)] * pq.read_metadata(b / 'manifest.parquet').num_rows))
                             for b in iter_buckets(root)])


def listed(root:Path, reason:str)->set:
    "(bucket, shard, index) of every sample on `reason`'s skip lists."
    return {(bucket_key(b), sh, i) for b in iter_buckets(root) for sh, idx in read_skips(b, [reason]).items() for i in idx}


@pytest.fixture(scope='module')
def meta(tmp_path_factory):
    d = tmp_path_factory.mktemp('ooc')
    return make_table(d / 'meta.lance')


def test_the_plan_on_disk_equals_the_plan_in_memory(meta, tmp_path):
    assert len(lance.dataset(meta).get_fragments()) > 3 and any(f.num_deletions for f in lance.dataset(meta).get_fragments())
    gone = {'s0/img000000.jpg', 's1/img002374.jpg'}
    for where, ex in ((None, ()), ("id LIKE 's1/%'", gone)):
        plan = plan_buckets(meta, Bucketer(), where, exclude=set(ex), batch_rows=257, memory_limit='64MB')  # many batches
        ref = reference_plan(meta, where, ex)
        assert list(plan) == list(ref) and len(plan) > 3
        for k, rows in plan.items():
            t = rows.read()
            assert list(zip(t['id'].to_pylist(), t['_pos'].to_pylist())) == ref[k]
            assert rows.slice(3, 5).read()['id'].to_pylist() == [i for i, _ in ref[k][3:8]]
            assert len(rows.slice(len(rows) - 2, 10)) == 2
    folder = next(iter(plan.values())).spill.folder
    assert folder.exists()
    del plan, rows
    import gc; gc.collect()
    assert not folder.exists()  # a plan's temporary folder goes with it
    ds = lance.dataset(meta)  # the positions are what `take` counts
    p = plan_buckets(meta, Bucketer())
    k = next(iter(p))
    t = p[k].read()
    assert ds.take(t['_pos'].combine_chunks(), columns=['id'])['id'].to_pylist() == t['id'].to_pylist()


@pytest.mark.parametrize('part_rows', [None, 100])
def test_merge_dedup_filter_and_optout_equal_the_in_memory_decisions(meta, tmp_path, monkeypatch, part_rows):
    if part_rows:  # dedup's ranking and filter's join in many parts, as at a billion rows: the same decisions
        import prx_nb.dedup, prx_nb.skips
        monkeypatch.setattr(prx_nb.dedup, 'RANK_ROWS', part_rows); monkeypatch.setattr(prx_nb.skips, 'JOIN_ROWS', part_rows)
    root = make_tree(meta, tmp_path / 'mds')
    s = samples(root)
    assert s.num_rows > 2000 and len({x for x in s['shard'].to_pylist()}) > 5
    for b in iter_buckets(root):  # the streamed merge: shard and index of each sample as its part's shards hold them
        m = pq.read_table(b / 'manifest.parquet')
        idx = json.loads((b / 'index.json').read_text())['shards']
        assert m.num_rows == sum(x['samples'] for x in idx)
        assert m['shard'].to_pylist() == [x['raw_data']['basename'] for x in idx for _ in range(x['samples'])]
        assert m['index'].to_pylist() == [i for x in idx for i in range(x['samples'])]
    # opt-outs first: the best copy of a group opted out is never the kept one
    v = s.filter(pc.is_valid(s['phash']))
    ph = v['phash'].to_numpy()
    u, c = np.unique(ph, return_counts=True)
    grp = set(u[c > 2][:5].tolist())
    best = [v['id'][int(np.flatnonzero(ph == g)[np.argmax((v['src_width'].to_numpy() * v['src_height'].to_numpy().astype(np.int64))[ph == g])])].as_py() for g in grp]
    r = optout(root, best + ['not/in/the/tree.jpg'])
    assert r['not_found'] == 1 and sum(n for k, n in r.items() if k != 'not_found') == len(best)
    assert {x for x in listed(root, 'optout')} == {(b, sh, i) for b, sh, i, x in zip(*(s[c].to_pylist() for c in ('bucket', 'shard', 'index', 'id'))) if x in best}
    for radius in (0, 2):
        res = dedup_tree(root, radius=radius, progress=False, memory_limit='64MB')
        t, _, _ = tree_fingerprints(root, progress=False)
        t = t.filter(pc.is_valid(t['phash']))
        blocked = pc.is_in(t['id'], value_set=pa.array(sorted(read_optouts(root)), pa.string())).to_numpy(zero_copy_only=False)
        keep, groups = dedup_keep(t['phash'].to_numpy(), t['src_width'].to_numpy().astype(np.int64) * t['src_height'].to_numpy(),
                                  t['src_nbytes'].to_numpy(), rank=np.asarray(pc.rank(t['id'], 'ascending', tiebreaker='first')),
                                  radius=radius, blocked=blocked)
        want = {(b, sh, i) for b, sh, i, k in zip(*(t[c].to_pylist() for c in ('bucket', 'shard', 'index')), keep) if not k}
        assert listed(root, 'dedup') == want and res.total_skipped == len(want) > 0
        assert res.groups == int((np.bincount(groups) > 1).sum()) and res.samples == s.num_rows
        assert not set(t.filter(pa.array(keep))['id'].to_pylist()) & set(best)  # never an opted-out copy kept
    # labels: a label with a score at least min_score skips; a null score is unscored and kept
    lab = lance.dataset(meta).to_table(columns=['id', 'label_kind', 'label_kind_score']).to_pylist()
    by_id = {x['id']: x for x in lab}
    for min_score, labels in ((0.0, ['text', 'nsfw']), (0.6, ['text'])):
        f = filter_tree(root, meta, 'label_kind', labels=labels, min_score=min_score, progress=False, memory_limit='64MB')
        for l in ['text', 'nsfw']:
            want = {(b, sh, i) for b, sh, i, x in zip(*(s[c].to_pylist() for c in ('bucket', 'shard', 'index', 'id')))
                    if l in labels and by_id[x]['label_kind'] == l and (by_id[x]['label_kind_score'] is None and min_score <= 0
                                                                          or (by_id[x]['label_kind_score'] or -1) >= min_score)}
            if l in labels: assert listed(root, l) == want and int(f.buckets[l].sum()) == len(want) > 0
        assert int(f.buckets.unlabelled.sum()) == sum(by_id[x]['label_kind'] is None for x in s['id'].to_pylist()) > 0
        unscored = sum(by_id[x]['label_kind'] in labels and by_id[x]['label_kind_score'] is None for x in s['id'].to_pylist())
        assert f.unscored == (unscored if min_score > 0 else 0) and f.samples == s.num_rows
    assert listed(root, 'nsfw')  # a label left out of a later run keeps its lists; the text lists were replaced
    # skips survive a rebuild of a bucket: by id, through the streamed manifest
    b = next(iter_buckets(root))
    before = skips_by_id(b)
    assert before and all(before.values())
    assert skip_ids(root, 'manual', [s['id'][0].as_py()])['not_found'] == 0


def test_a_killed_runs_spill_folder_is_swept(tmp_path):
    dead = tmp_path / '.spill.tmp999999999'; (dead / 'duckdb').mkdir(parents=True); (dead / 'x.parquet').write_bytes(b'x')
    live = tmp_path / f'.spill.tmp{os.getpid()}'; live.mkdir()
    gone = sweep_tmp(tmp_path)
    assert dead in gone and not dead.exists() and live.exists()
