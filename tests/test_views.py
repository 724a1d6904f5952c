"""Named views over one tree (prx_nb.views): a predicate over the table becomes the view's lists; the real loaders
(tree_dataset, a trainer's class through with_skips) serve exactly its samples, minus opt-outs, composed with the
skip reasons asked for; a reader that asks for every reason never gets a view; drop, export, the script, a rerun."""
import json, shutil, subprocess, sys
from pathlib import Path
import lance, pytest
from streaming import Stream, StreamingDataset
from prx_nb.tree import skip_files
from prx_nb.skips import skip_ids, optout, check_tree, skip_stats
from prx_nb.views import create_view, list_views, show_view, drop_view, export_view, view_path
from prx_nb.loader import tree_dataset, with_skips
import prx_nb.views as views

BIN = Path(sys.executable).parent
PHOTOS = "source = 'hf_photos'"  # cuts across buckets
WIDE = 'width > height * 1.2'  # whole buckets


@pytest.fixture(scope='module')
def tree(make_demo_tree):
    "The demo tree with the view `photos`, then one of its samples opted out and two on the `dedup` list"
    root, man = make_demo_tree('views')
    table = str(root.parent / 't.lance')
    every = {i for ids in man.values() for i in ids}
    want = set(lance.dataset(table).to_table(columns=['id'], filter=PHOTOS)['id'].to_pylist()) & every
    v = create_view(root, 'photos', where=PHOTOS, progress=False)
    assert v.kept == len(want) and 0 < len(want) < len(every)
    gone, *dup = sorted(want)[:3]
    optout(root, [gone])  # after the view was made: it applies all the same
    skip_ids(root, 'dedup', dup)
    return root, table, every, want, gone, set(dup)


def ids(ds):
    "The ids one full epoch serves"
    return [x['id'] for x in ds]


def test_the_view_serves_exactly_its_samples_minus_optouts_and_skips(tree):
    root, table, every, want, gone, dup = tree
    got = ids(tree_dataset(root, batch_size=1, view='photos', on_skip='drop', small='drop'))
    assert len(got) == len(set(got)) and set(got) == want - {gone} - dup  # reasons=None: every reason, and the view
    only = ids(tree_dataset(root, batch_size=1, view='photos', reasons=[], on_skip='drop', small='drop'))
    assert set(only) == want - {gone}  # no reason asked: the view and the opt-outs only
    both = ids(tree_dataset(root, batch_size=1, view='photos', reasons=['dedup'], on_skip='drop', small='drop'))
    assert set(both) == want - {gone} - dup


def test_a_trainers_own_class_reads_the_view(tree):
    root, table, every, want, gone, dup = tree
    keys = show_view(root, 'photos').buckets.query('served > 0').bucket.tolist()
    cls = with_skips(StreamingDataset, view='photos', reasons=['dedup'], on_skip='drop', small=None)
    ds = cls(streams=[Stream(local=str(root / k)) for k in keys], batch_size=1, batching_method='per_stream', shuffle=False)
    got = ids(ds)
    assert len(got) == len(set(got)) and set(got) == want - {gone} - dup
    plain = with_skips(StreamingDataset, on_skip='drop', small=None)(streams=[Stream(local=str(root / k)) for k in keys],
                                                                    batch_size=1, batching_method='per_stream', shuffle=False)
    assert set(ids(plain)) > set(got)  # the same buckets without the view: more samples


def test_every_reason_never_means_a_view(tree):
    root, table, every, want, gone, dup = tree
    assert set(ids(tree_dataset(root, batch_size=1, on_skip='drop', small='drop'))) == every - {gone} - dup
    st = skip_stats(root)
    assert not [c for c in st.columns if c.startswith('view-')] and st.skipped.sum() == 1 + len(dup)
    assert not (check_tree(root, hashes=False).level == 'error').any()
    with pytest.raises(ValueError, match="view='photos'"): tree_dataset(root, batch_size=1, reasons=['view-photos'])


def test_lists_show_and_the_lineage(tree):
    root, table, every, want, gone, dup = tree
    lin = json.loads(view_path(root, 'photos').read_text())
    assert lin['where'] == PHOTOS and lin['table'] == table and lin['lance_version'] == lance.dataset(table).version
    assert lin['kept'] == len(want) and sum(t['samples'] for t in lin['tiers'].values()) == len(every)
    lv = list_views(root)
    assert lv.name.tolist() == ['photos'] and lv.state.tolist() == ['ready']
    v = show_view(root, 'photos')
    assert v.kept == len(want) - 1 and v.served == len(want) - 1 - len(dup) and v.samples == len(every)  # live: opt-out, dedup
    assert set(v.tiers.index) == {int(k.split('/')[0]) for k in v.buckets.bucket} and not v.buckets.stale.any()


def test_bad_input_is_refused_naming_it(tree):
    root, table = tree[0], tree[1]
    with pytest.raises(ValueError, match=rf"'widht > 3'.*{table}.*width"): create_view(root, 'bad', where='widht > 3', progress=False)
    with pytest.raises(ValueError, match='must be a word'): create_view(root, 'a b', where=WIDE)
    with pytest.raises(ValueError, match='pass replace=True'): create_view(root, 'photos', where=PHOTOS)
    with pytest.raises(ValueError, match='keeps no sample'): create_view(root, 'none', where='width > 100000', progress=False)
    with pytest.raises(ValueError, match="no view 'nope'; its views: photos"): tree_dataset(root, batch_size=1, view='nope')
    assert list_views(root).name.tolist() == ['photos']


def test_export_is_a_tree_the_stock_reader_reads(tree, tmp_path):
    root, table, every, want, gone, dup = tree
    def stock(out):
        got = []
        for idx in sorted(out.glob('*/*/index.json')):
            got += ids(StreamingDataset(local=str(idx.parent), batch_size=1, shuffle=False))
        return got
    export_view(root, 'photos', tmp_path / 'exp', progress=False)
    got = stock(tmp_path / 'exp')
    assert len(got) == len(set(got)) and set(got) == want - {gone} - dup
    assert json.loads((tmp_path / 'exp' / 'view.json').read_text())['where'] == PHOTOS
    export_view(root, 'photos', tmp_path / 'exp2', reasons=[], progress=False)
    assert set(stock(tmp_path / 'exp2')) == want - {gone}


def test_a_killed_create_is_not_served_and_a_rerun_gives_the_same_lists(tree, tmp_path, monkeypatch):
    root = tmp_path / 'copy'
    shutil.copytree(tree[0], root)
    lists = lambda: {(p.parent.name, s): json.loads(p.read_text())['indices'] for p, s, r in skip_files(root) if r == 'view-photos'}
    before = lists()
    calls, real = [0], views.set_skips
    def dies(*a, **k):
        calls[0] += 1
        if calls[0] > 5: raise KeyboardInterrupt('killed')
        return real(*a, **k)
    monkeypatch.setattr(views, 'set_skips', dies)
    with pytest.raises(KeyboardInterrupt): create_view(root, 'photos', where='height > width', replace=True, progress=False)
    monkeypatch.setattr(views, 'set_skips', real)
    with pytest.raises(ValueError, match='unfinished'): tree_dataset(root, batch_size=1, view='photos')
    assert list_views(root).state.tolist() == ['unfinished: run its create again']
    create_view(root, 'photos', where=PHOTOS, progress=False)  # no replace needed: the last one did not finish
    assert lists() == before
    create_view(root, 'photos', where=PHOTOS, replace=True, progress=False)
    assert lists() == before


def test_a_lost_list_fails_closed_for_its_view_only_and_drop_removes_the_view(tree, tmp_path):
    root = tmp_path / 'copy'
    shutil.copytree(tree[0], root)
    p = next(p for p, s, r in skip_files(root) if r == 'view-photos')
    p.unlink()
    with pytest.raises(ValueError, match='missing'): tree_dataset(root, batch_size=1, view='photos')
    assert len(tree_dataset(root, batch_size=1))  # readers of the skip lists go on
    assert (check_tree(root, hashes=False).level == 'error').any()
    assert drop_view(root, 'photos') > 0
    assert not [r for _, _, r in skip_files(root) if r.startswith('view-')] and list_views(root).empty
    assert not (check_tree(root, hashes=False).level == 'error').any()
    with pytest.raises(ValueError, match="no view 'photos'; its views: none"): tree_dataset(root, batch_size=1, view='photos')


def test_two_views_intersect(tree):
    root, table, every, want, gone, dup = tree
    create_view(root, 'wide', where=WIDE, progress=False)
    try:
        wide = set(lance.dataset(table).to_table(columns=['id'], filter=WIDE)['id'].to_pylist())
        got = ids(tree_dataset(root, batch_size=1, view=['photos', 'wide'], reasons=[], on_skip='drop', small='drop'))
        assert set(got) == (want & wide) - {gone} and set(got) < want - {gone}
    finally: drop_view(root, 'wide')


def test_the_script(tree, tmp_path):
    root = tmp_path / 'copy'
    shutil.copytree(tree[0], root)
    run = lambda *a: subprocess.run([str(BIN / 'prx_view'), *a, '--mds', str(root)], capture_output=True, text=True, timeout=300)
    r = run('create', 'tall', '--where', 'height > width', '--quiet')
    assert r.returncode == 0, r.stderr
    assert 'view tall: where height > width' in r.stdout and 'samples served' in r.stdout
    r = run('list')
    assert r.returncode == 0 and 'tall' in r.stdout and 'photos' in r.stdout and 'ready' in r.stdout
    r = run('show', 'tall')
    assert r.returncode == 0 and 'share' in r.stdout and '512/' in r.stdout
    r = run('drop', 'tall')
    assert r.returncode == 0 and 'view tall dropped' in r.stdout
    r = run('show', 'tall')
    assert r.returncode != 0 and "no view 'tall'; its views: photos" in r.stderr and 'Traceback' not in r.stderr
    r = run('create', 'x', '--where', 'nosuch > 1')
    assert r.returncode != 0 and "'nosuch > 1'" in r.stderr and 'Traceback' not in r.stderr


def test_a_rebuilt_bucket_an_empty_replace_and_a_plain_rewrite_into_a_killed_export(tree, tmp_path):
    "A bucket written again with as many samples is refused by the view's readers; a replace whose predicate keeps nothing leaves the view; a rewrite without the view never resumes a killed export."
    from prx_nb.skips import rewrite, REWRITE_MARK
    from prx_nb.loader import prx_yaml
    root = tmp_path / 'copy'
    shutil.copytree(tree[0], root)
    before = show_view(root, 'photos')
    with pytest.raises(ValueError, match='keeps no sample .* left as it was'):
        create_view(root, 'photos', where="source = 'nowhere'", replace=True, progress=False)
    assert show_view(root, 'photos').buckets.equals(before.buckets)
    key = before.buckets.query('served > 0').bucket.iloc[0]
    idx = root / key / 'index.json'
    v = json.loads(idx.read_text())
    v['shards'][0]['raw_data']['hashes'] = {'sha1': '0' * 40}  # the same count of samples, other shards
    idx.write_text(json.dumps(v))
    with pytest.raises(ValueError, match='written again since'): tree_dataset(root, batch_size=1, view='photos')
    assert bool(show_view(root, 'photos').buckets.set_index('bucket').stale[key])
    shutil.rmtree(root); shutil.copytree(tree[0], root)
    export_view(root, 'photos', tmp_path / 'exp', progress=False)
    mark = tmp_path / 'exp' / REWRITE_MARK
    m = json.loads(mark.read_text()); m['finished'] = False; mark.write_text(json.dumps(m))  # as a killed export leaves it
    with pytest.raises(ValueError, match='unfinished rewrite with other options'): rewrite(root, tmp_path / 'exp', progress=False)
    assert 'view: "photos"' in prx_yaml(root, view='photos')
    with pytest.raises(ValueError, match='quote the name'): tree_dataset(root, batch_size=1, view=2024)


def test_a_view_read_from_another_folder_and_from_an_s3_copy(tree, tmp_path, s3, monkeypatch):
    "The same view, the tree named by a relative path from another working folder, and the tree uploaded to an S3 emulation (its lineage downloaded beside the cache)."
    import os
    root, table, every, want, gone, dup = tree
    expect = want - {gone}
    monkeypatch.chdir(tmp_path)
    rel = os.path.relpath(root, tmp_path)
    assert set(ids(tree_dataset(rel, batch_size=1, view='photos', reasons=[], on_skip='drop', small='drop'))) == expect
    s3(root, 'corpus', 'tree')
    remote = tree_dataset('s3://corpus/tree', local=str(tmp_path / 'cache'), batch_size=1, view='photos', reasons=[], on_skip='drop', small='drop')
    assert set(ids(remote)) == expect
    with pytest.raises(ValueError, match="no view 'nope'; its views: photos"):
        tree_dataset('s3://corpus/tree', local=str(tmp_path / 'cache2'), batch_size=1, view='nope')
