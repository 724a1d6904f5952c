"""The trainer's loader over a whole tree: every batch from one bucket, every skip reason applied (substitutes only
from the same bucket), under 1, 2 and 4 real rank processes with 2 workers each, deterministic, exactly resumable;
the writer leaves no empty bucket that stops the stock reader; the loader imports without Lance."""
import json, os, subprocess, sys, warnings
from pathlib import Path
import numpy as np, pytest
from streaming import StreamingDataLoader, StreamingDataset
from prx_nb.demo import demo_sources
from prx_nb.ingest import ingest
from prx_nb.mds import write_mds
from prx_nb.skips import skip_ids, optout, check_tree
from prx_nb.loader import tree_dataset, collate, decode_sample

HERE = Path(__file__).parent


@pytest.fixture(scope='module')
def tree(make_demo_tree):
    "The demo tree with every reason applied: dedup, text, nsfw and an opt-out, one bucket skipped whole."
    root, man = make_demo_tree('tree')
    big = max(man, key=lambda k: len(man[k]))
    whole = next(k for k in man if len(man[k]) == 1)
    skipped = {'dedup': set(man[big][::5]), 'text': set(man[big][1::7]) | set(man[whole]), 'nsfw': {man[big][3]}}
    for reason, ids in skipped.items(): skip_ids(root, reason, ids)
    gone = next(ids[0] for k, ids in man.items() if len(ids) > 2 and k != big)
    optout(root, [gone])
    skipped['optout'] = {gone}
    every = set().union(*skipped.values())
    kept = {i for ids in man.values() for i in ids} - every
    return root, man, every, kept, whole


def rows(dl):
    "[[id, width, height], ...] per batch (the loader yields dicts: StreamingDataLoader counts samples by a batch's first value)"
    return [[[i, w, h] for i, (w, h) in zip(b['id'], b['wh'])] for b in dl]


def run(root, bs=2, workers=2, **kw):
    ds = tree_dataset(root, batch_size=bs, **kw)
    return ds, StreamingDataLoader(ds, batch_size=bs, num_workers=workers,
                                   collate_fn=lambda xs: {'id': [x['id'] for x in xs], 'wh': [[x['width'], x['height']] for x in xs]})


def one_bucket_each(batches, bs):
    return all(len(b) == bs and len({(w, h) for _, w, h in b}) == 1 for b in batches)


@pytest.mark.parametrize('on_skip', ['substitute', 'drop'])
def test_one_process_two_workers_same_size_batches_every_reason(tree, on_skip):
    root, man, every, kept, whole = tree
    with pytest.warns(UserWarning, match=f'{whole} is left out.*every one of its 1 samples is skipped'):
        ds, dl = run(root, seed=5, on_skip=on_skip)
    assert whole not in ds.keys and len(ds.keys) == len(man) - 1
    batches = rows(dl)
    got = [i for b in batches for i, _, _ in b]
    assert one_bucket_each(batches, 2) and not set(got) & every
    assert set(got) == kept  # small='pad': every kept sample comes, the repeats only fill the last batch of a bucket
    assert len(batches) == len(dl) and len(got) == len(ds)
    assert isinstance(batches[0][0][1], int) and ds.caption_columns[ds.keys[0]] == 'caption_source'


def test_set_up_reads_each_buckets_skip_lists_once_and_keeps_them_off_the_streams(tree, monkeypatch):
    "Counting the buckets and building the substitutes share one read per bucket; the streams a worker gets carry no lists."
    import pickle, prx_nb.loader as L
    root, man, every, kept, whole = tree
    seen = []
    real = L.skip_arrays
    monkeypatch.setattr(L, 'skip_arrays', lambda b, *a, **k: seen.append(Path(b).relative_to(root).as_posix()) or real(b, *a, **k))
    with pytest.warns(UserWarning, match='left out'): ds = tree_dataset(root, batch_size=2, seed=5)
    assert sorted(seen) == sorted(man)  # every bucket once: the left-out one too (it is counted), none twice
    assert ds.num_skipped == len(every - set(man[whole]))
    assert not any(hasattr(st, '_prx_skips') for st in ds.streams)
    from streaming.base.spanner import Spanner
    import streaming.base.dataset as mosaic_dataset
    assert isinstance(ds.spanner, L.LeanSpanner) and mosaic_dataset.Spanner is Spanner  # Mosaic's class is back
    mosaic = Spanner(np.array(ds.samples_per_shard, np.int64))
    assert [ds.spanner[i] for i in range(ds.num_samples)] == [mosaic[i] for i in range(ds.num_samples)]
    assert len(pickle.dumps(ds.streams)) < 20_000
    for kw in (dict(), dict(on_skip='drop'), dict(small='drop'), dict(on_skip='drop', small='drop', batching_method='device_per_stream')):
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            d = tree_dataset(root, batch_size=2, seed=5, **kw)
        assert d.samples_per_bucket == {k: len(d.resample_streams(0, i)[1]) for i, k in enumerate(d.keys)}, kw  # counted, not resampled
    seen.clear()
    from streaming import Stream
    ds2 = L.TreeDataset(keys=ds.keys, streams=[Stream(local=str(root / k)) for k in ds.keys], batch_size=2, shuffle_seed=5)
    # streams that were not counted: their lists are read by the dataset itself, to the same table
    assert sorted(seen) == sorted(ds.keys) and np.array_equal(ds2._skip_ids, ds._skip_ids) and np.array_equal(ds2._skip_to, ds._skip_to)


def test_substitutes_come_from_the_same_bucket_even_when_a_shard_is_skipped_whole(tree):
    root, man, every, kept, whole = tree
    ds, _ = run(root, on_skip='substitute')
    at = {}
    for k, st in zip(ds.keys, ds.streams):  # which bucket each global sample id belongs to
        at |= {g: k for g in range(ds.sample_offset_per_stream[ds.streams.index(st)],
                                   ds.sample_offset_per_stream[ds.streams.index(st)] + ds.samples_per_stream[ds.streams.index(st)])}
    assert ds.num_skipped and all(at[int(s)] == at[g] for g, s in enumerate(ds.served_ids(np.arange(ds.num_samples))))


def test_small_drop_is_mosaics_way_and_says_which_buckets_it_leaves_out(tree):
    root, man, every, kept, whole = tree
    with pytest.warns(UserWarning, match='fewer than one global batch'):
        ds, dl = run(root, bs=4, on_skip='drop', small='drop')
    got = [i for b in rows(dl) for i, _, _ in b]
    assert len(got) == len(set(got)) and set(got) < kept  # no repeats, and the remainders are lost: why pad is the default
    assert all(n >= 4 for n in ds.samples_per_bucket.values())


def test_deterministic_for_a_seed_and_exact_resume(tree):
    root = tree[0]
    a, b, c = (rows(run(root, seed=s)[1]) for s in (3, 3, 4))
    assert a == b and a != c
    for on_skip in ('substitute', 'drop'):
        full = rows(run(root, seed=3, on_skip=on_skip)[1])
        _, first = run(root, seed=3, on_skip=on_skip)
        it, part = iter(first), []
        for _ in range(7): part.append(next(it))
        part = rows(part)
        state = first.state_dict()
        del it
        _, rest = run(root, seed=3, on_skip=on_skip)
        rest.load_state_dict(state)
        assert part + rows(rest) == full, on_skip


def ranks(tmp_path, root, world, bs=2, workers=2, tag='r', **cfg):
    "Start `world` rank processes as torchrun would; their outputs"
    procs, outs = [], []
    init = f'file://{tmp_path}/{tag}.init'
    for r in range(world):
        out = tmp_path / f'{tag}{r}.json'
        env = os.environ | dict(RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world),
                                MASTER_ADDR='127.0.0.1', MASTER_PORT='29512', PYTHONWARNINGS='ignore')
        c = dict(root=str(root), bs=bs, workers=workers, out=str(out), init=init) | cfg
        procs.append(subprocess.Popen([sys.executable, str(HERE / 'tree_rank.py'), json.dumps(c)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outs.append(out)
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), logs
    return [json.loads(o.read_text()) for o in outs]


@pytest.mark.parametrize('world,on_skip', [(2, 'drop'), (4, 'substitute')])
def test_ranks_take_the_same_steps_of_one_bucket_each_and_share_nothing(tmp_path, tree, world, on_skip):
    root, man, every, kept, whole = tree
    res = ranks(tmp_path, root, world, kw=dict(seed=1, on_skip=on_skip))
    steps = {len(r['batches']) for r in res}
    assert len(steps) == 1 and steps == {res[0]['len']}  # every rank the same number of steps, as len() says
    for r in res: assert one_bucket_each(r['batches'], 2)
    for step in zip(*(r['batches'] for r in res)):  # a global batch: one bucket on every rank
        assert len({(w, h) for b in step for _, w, h in b}) == 1
    got = [[i for b in r['batches'] for i, _, _ in b] for r in res]
    assert not set().union(*map(set, got)) & every and set().union(*map(set, got)) == kept


def test_ranks_without_padding_never_serve_a_sample_twice(tmp_path, tree):
    root, man, every, kept, whole = tree
    res = ranks(tmp_path, root, 2, kw=dict(seed=2, on_skip='drop', small='drop'))
    got = [i for r in res for b in r['batches'] for i, _, _ in b]
    assert got and len(got) == len(set(got)) and set(got) <= kept


def test_two_ranks_resume_exactly(tmp_path, tree):
    root = tree[0]
    kw = dict(kw=dict(seed=4, on_skip='drop'))
    full = ranks(tmp_path, root, 2, tag='f', **kw)
    state = tmp_path / 'state.json'
    first = ranks(tmp_path, root, 2, tag='a', stop=5, state=str(state), **kw)
    rest = ranks(tmp_path, root, 2, tag='b', resume=str(state), **kw)
    for r in range(2): assert first[r]['batches'] + rest[r]['batches'] == full[r]['batches']


def test_decode_helpers_give_tensors_of_the_bucket_size(tree):
    import torch
    root = tree[0]
    ds = tree_dataset(root, batch_size=2, transform=decode_sample, tiers=[512])
    dl = StreamingDataLoader(ds, batch_size=2, num_workers=2, collate_fn=collate)
    for b in dl:
        assert b['image'].dtype == torch.uint8 and b['image'].shape == (2, 3, int(b['height'][0]), int(b['width'][0]))
        assert len(b['caption']) == 2 and all(isinstance(c, str) for c in b['caption'])
    raw = tree_dataset(root, batch_size=2, buckets=['512/512x512', '512/576x448'], shuffle=False)
    x, y = raw[0], raw[len(raw) - 1]
    assert collate([x, x])['image'].shape == (2, 3, x['height'], x['width'])  # bytes decoded in collate
    with pytest.raises(ValueError, match='one image size per batch'):
        collate([x, y])


def test_choosing_tiers_buckets_and_proportions(tree):
    root, man = tree[0], tree[1]
    ds = tree_dataset(root, batch_size=2, tiers=[512, 1024], proportions={512: 0.75, 1024: 0.25}, epoch_size=400, seed=0)
    tiers = [k.split('/')[0] for k, n in ds.samples_per_bucket.items() for _ in range(n)]
    assert set(tiers) == {'512', '1024'} and abs(tiers.count('512') / len(tiers) - 0.75) < 0.05
    with pytest.raises(ValueError, match='no tier'): tree_dataset(root, batch_size=2, tiers=[333])
    with pytest.raises(ValueError, match='gives no share'): tree_dataset(root, batch_size=2, proportions={512: 1})


def test_a_bucket_whose_rows_are_all_rejected_leaves_nothing_for_the_stock_reader_to_trip_on(tmp_path, demo):
    import lance
    t = tmp_path / 't.lance'
    ingest(t, demo_sources(demo), progress=False)
    ds = lance.dataset(str(t))
    import pyarrow as pa
    t0 = ds.to_table(columns=['id', 'width', 'height', 'caption_source']).to_pylist()
    cap2 = ['' if r['width'] == r['height'] else r['caption_source'] for r in t0]  # square images: no caption
    ds.merge(pa.table({'id': [r['id'] for r in t0], 'cap2': pa.array(cap2, pa.string())}), left_on='id')
    w = write_mds(str(t), tmp_path / 'mds', caption_column='cap2', progress=False)
    empty = [k for k, b in w.buckets.items() if not b.written]
    assert empty and all(w.buckets[k].rejected['no_caption'] for k in empty)
    for k in empty:
        assert not (tmp_path / 'mds' / k / 'index.json').exists() and json.loads((tmp_path / 'mds' / k / 'bucket.json').read_text())['empty']
    for idx in (tmp_path / 'mds').glob('*/*/index.json'):  # the stock reader over every bucket a glob finds
        assert len(StreamingDataset(local=str(idx.parent), batch_size=1)) > 0
    assert not (check_tree(tmp_path / 'mds').level == 'error').any()
    again = write_mds(str(t), tmp_path / 'mds', caption_column='cap2', progress=False)  # a rerun: complete, not redone
    assert all(again.buckets[k].skipped_complete for k in empty)
    assert not set(empty) & set(tree_dataset(tmp_path / 'mds', batch_size=1).keys)


def test_the_loader_imports_without_lance_and_workers_print_no_fork_warning(tree):
    code = ('import sys; from prx_nb.loader import tree_dataset, collate, decode_sample; from streaming import StreamingDataLoader\n'
            f'ds = tree_dataset({str(tree[0])!r}, batch_size=2, transform=decode_sample)\n'
            'n = sum(len(b["id"]) for b in StreamingDataLoader(ds, batch_size=2, num_workers=2, collate_fn=collate))\n'
            'print("lance" in sys.modules, n)')
    r = subprocess.run([sys.executable, '-W', 'default', '-c', code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == 'False' and int(r.stdout.split()[1]) > 0
    assert 'fork' not in r.stderr.lower(), r.stderr


@pytest.mark.slow
def test_a_tree_in_an_s3_emulation_streams_like_the_local_one(tmp_path, tree, s3):
    root, man, every, kept, whole = tree
    s3(root, 'corpus', 'tree')
    with pytest.warns(UserWarning, match='left out'):
        ds, dl = run('s3://corpus/tree', seed=5, local=str(tmp_path / 'cache'))
    batches = rows(dl)
    got = [i for b in batches for i, _, _ in b]
    assert one_bucket_each(batches, 2) and not set(got) & every and set(got) == kept
    with pytest.raises(ValueError, match='give local='): tree_dataset('s3://corpus/tree', batch_size=2)
