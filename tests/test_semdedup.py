"Semantic dedup end to end: clusters, planted near duplicates kept once, the loader honouring `semdedup`, rows without embeddings, reruns, the script."
import json, shutil, subprocess, warnings
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
import lance, pytest
from conftest import BIN
from prx_nb.demo import DemoTruth
from prx_nb.explore import add_image_embeddings
from prx_nb.loader import tree_dataset
from prx_nb.semdedup import SAME_SCENE, unit_rows, cluster_embeddings, semdedup_groups, semdedup_tree, add_clusters
from prx_nb.table import write_back
from prx_nb.tree import iter_buckets, read_skips, skip_files


@pytest.fixture(scope='module')
def embedded(make_demo_tree):
    "A demo tree whose table holds EfficientNet-lite0 embeddings of every usable row."
    root, _ = make_demo_tree('semdedup')
    add_image_embeddings(str(root.parent / 't.lance'), progress=False)
    return root, str(root.parent / 't.lance')


def _samples(root):
    return [dict(m, bucket=b) for b in iter_buckets(root) for m in pq.read_table(b / 'manifest.parquet').to_pylist()]


def _skipped(root, reason='semdedup'):
    out = set()
    for b in iter_buckets(root):
        sk = read_skips(b, [reason])
        out |= {m['id'] for m in pq.read_table(b / 'manifest.parquet').to_pylist() if m['index'] in sk.get(m['shard'], ())}
    return out


def test_clusters_are_seeded_and_cover_every_row():
    rng = np.random.default_rng(1)
    x, _ = unit_rows(rng.standard_normal((2000, 32)).astype(np.float32))
    a, b, c = (cluster_embeddings(x, k=20, seed=s) for s in (0, 0, 1))
    assert np.array_equal(a.labels, b.labels) and not np.array_equal(a.labels, c.labels)
    assert len(a.labels) == 2000 and a.labels.min() >= 0 and a.sizes.sum() == 2000 and (a.sizes > 0).all()
    # a copy planted beside a row shares its group, whichever cluster the k-means put them in
    x2 = np.vstack([x, unit_rows(x[:1] + 0.01 * rng.standard_normal((1, 32)).astype(np.float32))[0]])
    cl = cluster_embeddings(x2, k=20, seed=0).labels
    assert cl[0] == cl[-1]
    g = semdedup_groups(x2, cl, threshold=0.95)
    assert g.labels[0] == g.labels[-1] and g.duplicated == 1


def test_planted_near_duplicates_keep_the_largest(embedded, demo):
    root, table = embedded
    r = semdedup_tree(root, table=table, k=4, threshold=0.85, embed=False, progress=False)
    truth = DemoTruth.load(demo / 'truth.json')
    s = _samples(root)
    px = {m['id']: m['src_width'] * m['src_height'] for m in s}
    nb = {m['id']: m['src_nbytes'] for m in s}
    skipped = _skipped(root)
    for g in truth.duplicates:  # resized, re-encoded and rotated copies of one photo: one group, the best source kept
        g = [i for i in g if i in px]
        if len(g) < 2: continue
        best = sorted(g, key=lambda i: (-px[i], -nb[i], i))[0]
        assert best not in skipped and set(g) - {best} <= skipped, g
    planted = {i for g in truth.duplicates for i in g}
    scene = {i for i in px if i.split('/')[-1] in SAME_SCENE}  # different photographs of one scene (the stereo motorcycles)
    assert skipped - planted <= set(truth.text) | scene  # anything else: rendered slides of one template, or one scene
    assert r.total_skipped == len(skipped) > 0 and r.no_embedding == {}
    # the loader serves none of them with the reason, and all of them without it
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        served = [x['id'] for x in tree_dataset(root, batch_size=1, on_skip='drop', shuffle=False, reasons=['semdedup'])]
        every = [x['id'] for x in tree_dataset(root, batch_size=1, on_skip='drop', shuffle=False, reasons=[])]
    assert not set(served) & skipped and set(every) >= skipped and len(served) == len(set(served))
    # a rerun: the same lists, no index twice, the columns not rewritten
    read = lambda: {str(p): json.loads(p.read_text())['indices'] for p, _, reason in skip_files(root) if reason == 'semdedup'}
    lists = read()
    again = semdedup_tree(root, table=table, k=4, threshold=0.85, embed=False, progress=False)
    assert again.clusters.reused and again.skipped == r.skipped
    assert read() == lists
    assert all(len(v) == len(set(v)) for v in lists.values())
    assert _skipped(root, 'dedup') == set()  # its own reason: dedup's lists are untouched


def test_rows_without_embedding_are_kept_with_a_reason(embedded, tmp_path):
    root, table = embedded
    t2 = str(tmp_path / 'partial.lance')
    shutil.copytree(table, t2)
    others = lance.dataset(t2).to_table(columns=['id'], with_row_id=True, filter="source != 'hf_photos'")
    write_back(t2, pa.table({'_rowid': others['_rowid'], 'embedding': pa.nulls(others.num_rows, lance.dataset(t2).schema.field('embedding').type)}))
    r = semdedup_tree(root, table=t2, k=2, threshold=0.85, embed=False, progress=False)
    in_tree = {m['id'] for m in _samples(root)}
    lacking = in_tree & set(others['id'].to_pylist())
    assert set(r.no_embedding) == lacking and all(w.startswith('no embedding (status ') for w in r.no_embedding.values())
    assert not _skipped(root) & lacking  # kept, never silently dropped
    c = add_clusters(t2, k=2, threshold=0.85, progress=False)
    assert c.reused and lance.dataset(t2).count_rows('cluster IS NULL') == lance.dataset(t2).count_rows() - c.clustered
    with pytest.raises(ValueError, match="no column 'clip'"): semdedup_tree(root, table=t2, column='clip', embed=False, progress=False)


def test_script_end_to_end(embedded):
    root, table = embedded
    r = subprocess.run([str(BIN / 'prx_semdedup'), '--mds', str(root), '--k', '3', '--quiet'], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'skipped as semdedup' in r.stdout and 'embedded rows in 3 clusters' in r.stdout and 'samples without an embedding (kept)' in r.stdout
    meta = {k.decode(): v.decode() for k, v in lance.dataset(table).schema.field('cluster').metadata.items()}
    assert meta['k'] == '3' and meta['embedding_column'] == 'embedding'
    e = subprocess.run([str(BIN / 'prx_semdedup'), '--mds', str(root), '--threshold', '0'], capture_output=True, text=True)
    assert e.returncode != 0 and 'threshold must be in (0, 1]' in e.stderr and 'Traceback' not in e.stderr


def test_a_local_siglip_checkpoint_embeds_and_clusters(tmp_path, embedded):
    "SigLIP from a local folder (a tiny random-weight one, built from a config): its embeddings fill a column of their own, named in its metadata, and cluster."
    from prx_nb.embed import HFEmbedder
    from prx_nb.testing import tiny_hf_checkpoint
    e = HFEmbedder(str(tiny_hf_checkpoint(tmp_path / 'siglip', 'siglip', width=48)))
    assert (e.kind, e.dim) == ('siglip', 48) and e.name.startswith('siglip-siglip-')
    _, table = embedded
    t = str(tmp_path / 'copy.lance')
    shutil.copytree(table, t)
    add_image_embeddings(t, column='embedding_siglip', embedder=e, progress=False)
    ds = lance.dataset(t)
    assert ds.schema.field('embedding_siglip').metadata[b'model'].decode() == e.name
    assert ds.count_rows('embedding_siglip IS NOT NULL') == ds.count_rows("status = 'ok'")
    with pytest.raises(ValueError, match='column embedding_siglip holds'):
        add_image_embeddings(t, column='embedding_siglip', progress=False)  # EfficientNet into SigLIP's column: refused
    add_clusters(t, column='embedding_siglip', k=3, out='cluster_siglip', group_out='group_siglip', progress=False)
    got = lance.dataset(t).to_table(columns=['cluster_siglip'], filter='embedding_siglip IS NOT NULL')['cluster_siglip']
    assert got.null_count == 0 and set(got.to_pylist()) == {0, 1, 2}
    assert lance.dataset(t).schema.field('cluster_siglip').metadata[b'embedding_model'].decode() == e.name
