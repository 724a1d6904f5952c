"""The trainer a lab already has: the `image` field PRX reads, legacy trees migrated in place, skip lists mixed into
any StreamingDataset subclass (`with_skips`) under device_per_stream, 1 and 2 ranks, 2 workers and exact resume;
PRX's own loader through `prx_dataset` where PRX is importable; the pre-flight report; Mosaic's argument names."""
import collections, json, os, shutil, subprocess, sys, warnings
from pathlib import Path
import numpy as np, pyarrow.parquet as pq, pytest
from streaming import Stream, StreamingDataset
from torch.utils.data import DataLoader
from prx_nb.tree import iter_buckets, bucket_key, file_sha1
from prx_nb.mds import migrate_tree, bucket_columns, caption_fields
from prx_nb.skips import skip_ids, optout
from prx_nb.loader import (tree_dataset, with_skips, batch_report, decode_sample, collate, prx_yaml, prx_locals,
                           prx_dataset, SkipsMixin)

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from test_tree_loader import ranks  # noqa: E402  the torchrun-like rank harness


@pytest.fixture(scope='module')
def tree(make_demo_tree):
    "The demo tree with dedup, text and opt-out skips; (root, table, ids by bucket, skipped, kept)"
    root, man = make_demo_tree('trainer')
    big = max(man, key=lambda k: len(man[k]))
    skip_ids(root, 'dedup', set(man[big][::4]))
    skip_ids(root, 'text', set(man[big][1::6]))
    gone = next(ids[0] for k, ids in man.items() if len(ids) > 2 and k != big)
    optout(root, [gone])
    every = set(man[big][::4]) | set(man[big][1::6]) | {gone}
    kept = {i for ids in man.values() for i in ids} - every
    return root, root.parent / 't.lance', man, every, kept


def served_ids(ds, bs, workers=2):
    dl = DataLoader(ds, batch_size=bs, num_workers=workers, collate_fn=lambda xs: [(x['id'], x['width'], x['height']) for x in xs])
    return [b for b in dl]


def test_samples_hold_the_fields_prx_reads_and_stock_readers_decode_them(tree):
    import lance
    root, table, man = tree[:3]
    t = lance.dataset(str(table)).to_table().to_pylist()
    rows = {r['id']: r for r in t}
    caps = caption_fields(lance.dataset(str(table)).schema)
    assert 'caption_source' in caps
    for b in iter_buckets(root):
        cols = bucket_columns(b)
        assert cols['image'] == 'jpeg' and cols['original_width'] == cols['original_height'] == 'int32' and 'jpg' not in cols
        assert {c for c in cols if c.startswith('caption_')} == set(caps)
    k = max(man, key=lambda k: len(man[k]))
    w, h = map(int, k.split('/')[1].split('x'))
    ds = StreamingDataset(streams=[Stream(local=str(root / k))], batch_size=1)  # Mosaic's own reader, its jpeg decoder
    m = pq.read_table(root / k / 'manifest.parquet').to_pylist()
    for i, (s, r) in enumerate(zip((ds[i] for i in range(ds.num_samples)), m)):
        assert s['image'].format == 'JPEG' and s['image'].size == (w, h) == (s['width'], s['height'])
        assert (s['original_width'], s['original_height']) == (r['src_width'], r['src_height'])
        assert s['caption_source'] == (rows[s['id']]['caption_source'] or '') and s['caption'] == s['caption_source']
    raw = next(iter_bucket_raw(root / k))
    assert raw[:2] == b'\xff\xd8'  # the q92 bytes as written, not re-encoded


def iter_bucket_raw(b):
    from prx_nb.mds import iter_bucket
    for s in iter_bucket(b): yield s['image']


def test_the_stock_streaming_dataset_reads_every_bucket(tree):
    root, _, man = tree[:3]
    ds = StreamingDataset(streams=[Stream(local=str(b)) for b in iter_buckets(root)], batch_size=1, shuffle=False)
    assert ds.num_samples == sum(map(len, man.values()))
    assert all('image' in ds[i] for i in range(0, ds.num_samples, 7))


def test_a_legacy_tree_is_migrated_in_place_and_read_in_both_layouts(tmp_path, tree):
    root = tree[0]
    old = tmp_path / 'old'
    shutil.copytree(root, old)
    for b in iter_buckets(old):  # the layout trees had before the image field: jpg, bytes
        p = b / 'index.json'
        idx = json.loads(p.read_text())
        for s in idx['shards']:
            s['column_encodings'] = ['bytes' if n == 'image' else e for n, e in zip(s['column_names'], s['column_encodings'])]
            s['column_names'] = ['jpg' if n == 'image' else n for n in s['column_names']]
        p.write_text(json.dumps(idx))
    before = {p.relative_to(old): file_sha1(p) for p in old.rglob('*.mds')}
    a = tree_dataset(old, batch_size=1, shuffle=False)
    with pytest.raises(ValueError, match='prx_migrate_mds'): prx_yaml(old)
    got = migrate_tree(old, progress=False)
    assert all(got.values()) and not any(migrate_tree(old, progress=False).values())  # twice: nothing more to do
    assert {p.relative_to(old): file_sha1(p) for p in old.rglob('*.mds')} == before  # the shards byte-identical
    b, c = tree_dataset(old, batch_size=1, shuffle=False), tree_dataset(root, batch_size=1, shuffle=False)
    for i in range(0, a.num_samples, 5):
        assert a[i]['image'] == b[i]['image'] == c[i]['image'] and isinstance(a[i]['image'], bytes)
    assert all(bucket_columns(x)['image'] == 'jpeg' for x in iter_buckets(old))
    r = subprocess.run(['prx_migrate_mds', '--mds', str(old)], capture_output=True, text=True)
    assert r.returncode == 0 and '0 of' in r.stdout


def test_decode_float_and_pil_give_the_same_pixels(tree):
    import torch
    root = tree[0]
    ds = tree_dataset(root, batch_size=2, shuffle=False)
    s = ds[0]
    u, f = decode_sample(s)['image'], decode_sample(s, dtype='float')['image']
    assert u.dtype == torch.uint8 and f.dtype == torch.float32 and 0 <= f.min() and f.max() <= 1 and f.max() > 0.5
    assert torch.allclose(f, u.float() / 255)
    k = ds.keys[0]
    stock = StreamingDataset(streams=[Stream(local=str(root / k))], batch_size=1, shuffle=False)[0]
    assert decode_sample(stock)['image'].shape == (3, stock['height'], stock['width'])  # a PIL image from Mosaic's decoder
    i = int(ds.sample_offset_per_stream[int(np.argmax(ds.samples_per_stream))])  # two samples of one bucket
    b = collate([ds[i], ds[i + 1]], dtype='float')
    assert b['image'].dtype == torch.float32 and b['original_width'].shape == (2,) and 'caption_source' in b
    with pytest.raises(ValueError, match='dtype'): decode_sample(s, dtype='half')


def test_mosaic_argument_names_are_honoured_or_named(tree):
    root = tree[0]
    a = tree_dataset(root, batch_size=4, shuffle_seed=7)
    b = tree_dataset(root, batch_size=4, seed=7)
    assert a.shuffle_seed == b.shuffle_seed == 7
    with pytest.raises(TypeError, match='seed=3 and shuffle_seed=7'): tree_dataset(root, batch_size=4, seed=3, shuffle_seed=7)
    with pytest.raises(TypeError, match='leave out streams='): tree_dataset(root, batch_size=4, streams=[])
    c = tree_dataset(root, batch_size=4, num_canonical_nodes=2, predownload=8)
    assert c.num_canonical_nodes == 2 and c.predownload == 8


@pytest.mark.parametrize('on_skip', ['drop', 'substitute'])
def test_tree_dataset_device_per_stream_every_kept_sample_no_skipped(tree, on_skip):
    root, _, man, every, kept = tree
    ds = tree_dataset(root, batch_size=3, batching_method='device_per_stream', on_skip=on_skip, seed=2)
    batches = served_ids(ds, 3)
    got = [i for b in batches for i, _, _ in b]
    assert all(len(b) == 3 and len({(w, h) for _, w, h in b}) == 1 for b in batches)  # every device batch one bucket
    assert set(got) == kept and not set(got) & every
    rep = batch_report(ds, workers=2)
    assert rep['dropped'].sum() == 0 and rep['skipped_served'].sum() == 0 and rep.attrs['mixed_batches'] == 0
    if on_skip == 'drop': assert len(got) == len(kept) + rep['repeated'].sum()  # the report foretold the repeats


def kept_folders(tree):
    root, _, man, every, kept = tree
    return [str(root / k) for k, ids in man.items() if set(ids) - every]


@pytest.mark.parametrize('small', ['pad', 'drop'])
def test_with_skips_over_the_stock_class_and_the_report(tree, small):
    root, _, man, every, kept = tree
    cls = with_skips(StreamingDataset, on_skip='drop', small=small)
    assert issubclass(cls, StreamingDataset) and issubclass(cls, SkipsMixin) and cls is with_skips(StreamingDataset, on_skip='drop', small=small)
    make = lambda fs: cls(streams=[Stream(local=f) for f in fs], batch_size=2, batching_method='device_per_stream',
                          shuffle=True, shuffle_seed=3)
    folders = kept_folders(tree)
    if small == 'drop':  # a bucket Mosaic cannot fill one batch from: named, not a crash inside a worker
        with pytest.raises(ValueError, match='fewer than one batch on every node fills'): served_ids(make(folders), 2, workers=0)
        folders = [f for f in folders if len(set(man[bucket_key(Path(f))]) - every) >= 6]
        kept = {i for f in folders for i in man[bucket_key(Path(f))]} - every
    ds = make(folders)
    got = [i for b in served_ids(ds, 2) for i, _, _ in b]
    assert not set(got) & every
    rep = batch_report(ds, workers=2)
    assert len(got) == rep['served'].sum() and rep['skipped_served'].sum() == 0
    if small == 'pad': assert set(got) == kept and rep['dropped'].sum() == 0
    else: assert len(got) == len(set(got)) and rep['repeated'].sum() == 0 and set(got) < kept
    for world in [dict(nodes=1, ranks_per_node=2, workers=2), dict(nodes=2, ranks_per_node=2, workers=3, batch_size=3)]:
        r = batch_report(ds, **world)
        assert r['skipped_served'].sum() == 0 and r.attrs['mixed_batches'] == 0
        if small == 'pad': assert r['dropped'].sum() == 0


def test_an_instance_pickles_by_its_base_class_and_options(tree):
    import pickle
    root, _, man, every, kept = tree
    cls = with_skips(StreamingDataset, on_skip='drop')
    ds = cls(streams=[Stream(local=f) for f in kept_folders(tree)], batch_size=2, batching_method='device_per_stream')
    again = pickle.loads(pickle.dumps(ds))  # what a DataLoader worker started with spawn receives
    assert type(again) is cls and again.num_skipped == ds.num_skipped and (again.served_ids(range(ds.num_samples)) == ds.served_ids(range(ds.num_samples))).all()
    assert {again[i]['id'] for i in range(again.num_samples) if again.served_ids([i])[0] >= 0} == kept


def test_with_skips_refuses_what_it_cannot_honour():
    with pytest.raises(TypeError, match='StreamingDataset subclass'): with_skips(dict)
    with pytest.raises(TypeError, match='honours skip lists already'): with_skips(with_skips(StreamingDataset))
    with pytest.raises(ValueError, match='on_skip'): with_skips(StreamingDataset, on_skip='keep')


def test_with_skips_over_a_class_with_its_own_constructor_resumes_exactly(tree):
    root, _, man, every, kept = tree
    class Trainers(StreamingDataset):  # a trainer's class: its own constructor and its own __getitem__
        def __init__(self, folders, bs):
            super().__init__(streams=[Stream(local=f) for f in folders], batch_size=bs, shuffle=True, shuffle_seed=5,
                             batching_method='device_per_stream')
        def __getitem__(self, i): return super().__getitem__(i) | {'prompt': 'x'}
    cls = with_skips(Trainers, on_skip='drop')
    full = served_ids(cls(kept_folders(tree), 2), 2)
    assert {i for b in full for i, _, _ in b} == kept
    ds = cls(kept_folders(tree), 2)
    first = []
    for b in DataLoader(ds, batch_size=2, num_workers=2, collate_fn=lambda xs: [(x['id'], x['width'], x['height']) for x in xs]):
        first.append(b)
        if len(first) == 5: break
    state = ds.state_dict(num_samples=10, from_beginning=False)
    del ds
    again = cls(kept_folders(tree), 2)
    again.load_state_dict(state)
    rest = served_ids(again, 2)
    assert [list(map(tuple, b)) for b in first + rest] == [list(map(tuple, b)) for b in full]


def test_two_ranks_two_workers_with_skips_resume_exactly(tmp_path, tree):
    root, _, man, every, kept = tree
    kw = dict(folders=kept_folders(tree), seed=6, skips=dict(on_skip='drop'))
    full = ranks(tmp_path, root, 2, tag='wf', **kw)
    got = {i for r in full for b in r['batches'] for i, _, _ in b}
    assert got == kept
    for step in zip(*(r['batches'] for r in full)): assert all(len({(w, h) for _, w, h in b}) == 1 for b in step)
    state = tmp_path / 'wstate.json'
    first = ranks(tmp_path, root, 2, tag='wa', stop=3, state=str(state), **kw)
    rest = ranks(tmp_path, root, 2, tag='wb', resume=str(state), **kw)
    for r in range(2): assert first[r]['batches'] + rest[r]['batches'] == full[r]['batches']


def test_prx_locals_finds_the_buckets_of_a_tree_or_tier_and_splits_shares(tree):
    root, _, man, every, kept = tree
    folders, shares, left = prx_locals(str(root))
    n_kept = {k: len(set(ids) - every) for k, ids in man.items()}
    assert sorted(folders) == sorted(str(root / k) for k, n in n_kept.items() if n) and shares is None
    assert set(left) == {f'{root}/{k}' for k, n in n_kept.items() if not n}
    tiers = sorted({k.split('/')[0] for k in man}, key=int)
    folders, shares, _ = prx_locals([str(root / t) for t in tiers[:2]], [0.25, 0.75])
    assert abs(sum(shares) - 1) < 1e-9 and all(Path(f).parent.name in tiers[:2] for f in folders)
    per = collections.defaultdict(float)
    for f, s in zip(folders, shares): per[Path(f).parent.name] += s
    assert abs(per[tiers[0]] - 0.25) < 1e-9


def test_prx_trainer_yaml_is_a_config_for_the_tree(tree):
    import yaml
    root = tree[0]
    r = subprocess.run(['prx_trainer_yaml', '--mds', str(root)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    c = yaml.safe_load(r.stdout)
    assert c['_target_'] == 'prx_nb.loader.prx_dataset' and c['streaming']['batching_method'] == 'device_per_stream'
    assert all(Path(p).parent == root for p in c['local']) and abs(sum(c['proportions']) - 1) < 1e-3
    assert c['processed']['has_text_latents'] is False and 'caption_source' in r.stdout
    bad = subprocess.run(['prx_trainer_yaml', '--mds', str(root / 'nowhere')], capture_output=True, text=True)
    assert bad.returncode != 0 and 'no finished buckets' in bad.stderr


def _prx_importable()->bool:
    try:
        import prx.dataset.mds_dataset  # noqa: F401
        return True
    except Exception: return False


def test_prx_dataset_without_prx_says_how_to_install(tree, monkeypatch):
    if _prx_importable(): pytest.skip('PRX is importable here: the install message is not reached')
    with pytest.raises(ImportError, match='github.com/Photoroom/PRX'): prx_dataset(str(tree[0]))


@pytest.mark.skipif(not _prx_importable(), reason="Photoroom's PRX is not importable (not on PyPI: put a checkout on PYTHONPATH with its "
                                                  'dependencies to run this)')
def test_prxs_own_loader_through_prx_dataset_serves_every_kept_sample_and_no_skipped_one(tree):
    from hydra.utils import instantiate
    import yaml
    root, _, man, every, kept = tree
    c = yaml.safe_load(prx_yaml(root, num_workers=2))
    c['processed']['caption_keys'] = [['id', 1.0]]  # the prompt is the sample's id
    c['processed']['transforms'] = None
    c['dataloader'].update(persistent_workers=False, pin_memory=False)
    ds = instantiate(c)
    got = [i for b in ds.get_dataloader(batch_size=2) for i in b['prompt']]
    assert set(got) == kept and not set(got) & every
    assert len(got) == len(kept) + batch_report(ds, workers=2, batch_size=2)['repeated'].sum()
