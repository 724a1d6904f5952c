"SkipStreamingDataset: never a skipped sample, with DataLoader workers and shuffling, and exact mid-epoch resume."
import pytest
from streaming import StreamingDataLoader, StreamingDataset
from prx_nb.demo import demo_sources
from prx_nb.ingest import ingest
from prx_nb.mds import write_mds
from prx_nb.tree import read_skips
from prx_nb.skips import skip_ids
from prx_nb.loader import SkipStreamingDataset
import pyarrow.parquet as pq


@pytest.fixture(scope='module')
def tree(tmp_path_factory, demo):
    d = tmp_path_factory.mktemp('tree')
    ingest(d / 't.lance', demo_sources(demo), progress=False)
    w = write_mds(str(d / 't.lance'), d / 'mds', shard_bytes=1 << 20, progress=False)  # 1 MB shards: several per big bucket
    return d / 'mds', w


def ids_of(batches): return [i for b in batches for i in b['id']]


def loader(local, bs=2, workers=2, **kw):
    ds = SkipStreamingDataset(local=str(local), batch_size=bs, shuffle=True, shuffle_seed=11, **kw)
    return ds, StreamingDataLoader(ds, batch_size=bs, num_workers=workers, collate_fn=lambda xs: {'id': [x['id'] for x in xs]})


def biggest(tree):
    root, w = tree
    k = max(w.buckets, key=lambda k: w.buckets[k].written)
    return root / k, pq.read_table(root / k / 'manifest.parquet').to_pylist()


def test_multi_worker_iteration_never_yields_skipped(tree):
    local, man = biggest(tree)
    drop = {m['id'] for m in man[1::3]}
    skip_ids(tree[0], 'nsfw', drop)
    assert sum(map(len, read_skips(local, ['nsfw']).values())) == len(drop)
    ds, dl = loader(local)
    got = ids_of(dl)
    assert len(got) == len(man) and not set(got) & drop
    assert set(got) == {m['id'] for m in man} - drop
    ds2, dl2 = loader(local, reasons=['text'])  # another reason: nothing skipped
    assert sorted(ids_of(dl2)) == sorted(m['id'] for m in man)


def test_exact_mid_epoch_resume(tree):
    local, man = biggest(tree)
    skip_ids(tree[0], 'dedup', {m['id'] for m in man[::4]})
    _, full = loader(local, workers=2)
    uninterrupted = ids_of(full)
    _, first = loader(local, workers=2)
    part, it = [], iter(first)
    for _ in range(3): part.append(next(it))
    state = first.state_dict()
    del it
    ds, rest = loader(local, workers=2)
    rest.load_state_dict(state)
    resumed = ids_of(part) + ids_of(rest)
    assert resumed == uninterrupted


def test_stock_reader_sees_all_and_weighted_streams_still_work(tree):
    from streaming import Stream
    root, w = tree
    keys = sorted(w.buckets, key=lambda k: -w.buckets[k].written)[:2]
    plain = StreamingDataset(local=str(root / keys[0]), batch_size=1)
    assert len(plain) == w.buckets[keys[0]].written
    del plain
    ds = SkipStreamingDataset(streams=[Stream(local=str(root / k), proportion=p) for k, p in zip(keys, (0.75, 0.25))],
                              batch_size=1, epoch_size=40, shuffle=True, shuffle_seed=3)
    skipped = {m['id'] for k in keys for m in pq.read_table(root / k / 'manifest.parquet').to_pylist()} & \
              set().union(*[{r['id'] for r in pq.read_table(root / k / 'manifest.parquet').to_pylist()
                             if r['index'] in read_skips(root / k).get(r['shard'], set())} for k in keys])
    got = [s['id'] for s in ds]
    assert len(got) == 40 and not set(got) & skipped
