"""The opt-out promise on every reader path: whatever the reasons chosen, whatever happened to the sidecars, with
several writers at once, from a new tree, a second rewrite or a remote (another folder, an S3 emulation), an opted-out id
is never served; damaged trees stop every tool, naming the file, and `prx_check` reports each damage."""
import json, shutil, subprocess, sys, warnings
from pathlib import Path
import pyarrow.parquet as pq, pytest
from streaming import StreamingDataset
from conftest import BIN
from prx_nb.testing import tiny_image
from prx_nb.ingest import ingest
from prx_nb.tree import iter_buckets, read_optouts, read_ledger, read_skips
from prx_nb.mds import write_mds
from prx_nb.skips import optout, skip_ids
from prx_nb.loader import SkipStreamingDataset
from prx_nb.dedup import dedup_tree


def picture(seed):
    "A distinct 512x512 JPEG (8x8 random blocks)"
    import io, numpy as np
    from PIL import Image
    a = np.random.default_rng(seed).integers(0, 255, (8, 8, 3), dtype='uint8').repeat(64, 0).repeat(64, 1)
    b = io.BytesIO(); Image.fromarray(a).save(b, 'JPEG', quality=90); return b.getvalue()


@pytest.fixture
def tree(tmp_path):
    d = tmp_path / 'imgs'; d.mkdir()
    for i in range(24): (d / f'{i:02d}.png').write_bytes(picture(i)); (d / f'{i:02d}.txt').write_text(f'picture {i}')
    ingest(tmp_path / 't.lance', [f'folder:{d}'], progress=False)
    w = write_mds(str(tmp_path / 't.lance'), tmp_path / 'mds', progress=False)
    (b,) = list(iter_buckets(tmp_path / 'mds'))
    return tmp_path / 'mds', b, w


def served(bucket, **kw):
    ds = SkipStreamingDataset(local=str(bucket), batch_size=1, **kw)
    return [ds[i]['id'] for i in range(ds.num_samples)], ds


def test_opt_outs_apply_whatever_reasons_are_chosen(tree):
    root, b, _ = tree
    optout(root, ['imgs/03.png'])
    skip_ids(root, 'dedup', ['imgs/04.png'])
    for reasons in (None, ['dedup'], ['text'], []):
        got, _ = served(b, reasons=reasons)
        assert 'imgs/03.png' not in got, reasons
    assert 'imgs/04.png' in served(b, reasons=['text'])[0]  # other reasons stay an ablation


@pytest.mark.parametrize('damage', ['delete', 'empty', 'rename'])
def test_a_damaged_or_missing_sidecar_does_not_let_an_opted_out_id_through(tree, damage):
    root, b, _ = tree
    optout(root, ['imgs/05.png', 'imgs/06.png'])
    (side,) = sorted(b.glob('*.skip.optout.json'))
    if damage == 'delete': side.unlink()
    elif damage == 'empty': side.write_text(json.dumps({'indices': []}))
    else: side.rename(side.with_suffix('.JSON'))
    if damage != 'empty':  # a list the bucket's record names is gone: the bucket is refused, naming it
        with pytest.raises(ValueError, match=f'{side}: missing'): served(b)
        optout(root, ['imgs/05.png', 'imgs/06.png'])  # puts the list back
    got, ds = served(b)
    assert not {'imgs/05.png', 'imgs/06.png'} & set(got) and ds.num_skipped == 2


def test_a_missing_manifest_refuses_the_bucket_and_corrupt_sidecars_name_their_file(tree):
    root, b, _ = tree
    optout(root, ['imgs/07.png'])
    (b / 'manifest.parquet').rename(b / 'manifest.bak')
    with pytest.raises(ValueError, match='manifest.parquet is missing'): served(b)
    (root.parent / 'ids.txt').write_text('imgs/08.png\n')
    r = subprocess.run([str(BIN / 'prx_optout'), '--mds', str(root), '--ids', str(root.parent / 'ids.txt')], capture_output=True, text=True)
    assert r.returncode != 0 and 'manifest.parquet is missing' in r.stderr and 'Traceback' not in r.stderr
    assert 'imgs/08.png' in read_optouts(root)  # recorded all the same, and the bucket is refused, not served
    (b / 'manifest.bak').rename(b / 'manifest.parquet')
    (side,) = sorted(b.glob('*.skip.optout.json'))
    for junk in ('{not json', '{"idx": [1]}', '{"indices": "1,2"}'):
        side.write_text(junk)
        with pytest.raises(ValueError, match=side.name): served(b)


def test_concurrent_optouts_lose_no_acknowledged_id(tree):
    root, b, _ = tree
    ids = [[f'user{w}/{i:03d}' for i in range(40)] + [f'imgs/{w * 4 + j:02d}.png' for j in range(4)] for w in range(4)]
    files = []
    for w, chunk in enumerate(ids):
        files.append(root.parent / f'ids{w}.txt'); files[-1].write_text(''.join(i + '\n' for i in chunk))
    ps = [subprocess.Popen([str(BIN / 'prx_optout'), '--mds', str(root), '--ids', str(f)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE) for f in files]
    assert all(p.wait(timeout=120) == 0 for p in ps), [p.stderr.read() for p in ps]
    want = {i for c in ids for i in c}
    assert read_optouts(root) == want
    assert sum(map(len, read_skips(b, ['optout']).values())) == 16
    assert not {i for i in served(b)[0] if i.startswith('imgs/') and int(i[5:7]) < 16}


def test_ids_files_are_read_exactly(tmp_path):
    from prx_nb.tree import read_ids
    p = tmp_path / 'ids.txt'
    p.write_bytes(b' padded id \r\nplain\n')
    assert read_ids(p) == [' padded id ', 'plain']
    for raw, want in ((b'\xef\xbb\xbfa\n', 'byte-order mark'), ('caf\xe9\n'.encode('latin-1'), 'not UTF-8'), (b'a\n\nb\n', 'line 2')):
        p.write_bytes(raw)
        with pytest.raises(ValueError, match=want): read_ids(p)
    r = subprocess.run([str(BIN / 'prx_optout'), '--mds', str(tmp_path), '--ids', str(p)], capture_output=True, text=True)
    assert r.returncode != 0 and 'line 2' in r.stderr and 'Traceback' not in r.stderr


def test_dedup_keeps_a_copy_that_may_be_served(tmp_path):
    d = tmp_path / 'imgs'; d.mkdir()
    img = picture(1)
    for n in ('a', 'b', 'c'): (d / f'{n}.png').write_bytes(img); (d / f'{n}.txt').write_text('a copy')  # three copies of one picture
    ingest(tmp_path / 't.lance', [f'folder:{d}'], progress=False)
    write_mds(str(tmp_path / 't.lance'), tmp_path / 'mds', progress=False)
    optout(tmp_path / 'mds', ['imgs/a.png'])  # the copy dedup would keep first (lowest id)
    dedup_tree(tmp_path / 'mds', progress=False)
    (b,) = list(iter_buckets(tmp_path / 'mds'))
    assert set(served(b)[0]) == {'imgs/b.png'}  # the picture stays, served from a copy that was not opted out


def test_an_unfinished_bucket_is_not_a_bucket(tree):
    root, b, _ = tree
    part = b.with_name(b.name + '.partial')
    import shutil; shutil.copytree(b, part)  # a kill after bucket.json landed in .partial, before the rename
    assert list(iter_buckets(root)) == [b]
    r = subprocess.run([str(BIN / 'prx_skip_stats'), '--mds', str(root)], capture_output=True, text=True, check=True)
    assert '.partial' not in r.stdout


def test_a_new_tree_from_the_same_table_and_a_second_rewrite_honour_earlier_opt_outs(tree):
    root, b, _ = tree
    table = root.parent / 't.lance'
    optout(root, ['imgs/09.png'])
    assert read_ledger(table) == {'imgs/09.png'}  # the ledger lives with the table
    write_mds(str(table), root.parent / 'again', progress=False)  # a new folder: the ledger still holds
    (nb,) = list(iter_buckets(root.parent / 'again'))
    assert 'imgs/09.png' not in set(served(nb)[0]) and 'imgs/09.png' in read_optouts(root.parent / 'again')
    r = subprocess.run([str(BIN / 'prx_rewrite'), '--mds', str(root), '--out', str(root.parent / 'slim'), '--quiet'],
                       capture_output=True, text=True, check=True)
    optout(root, ['imgs/10.png'])  # opted out after the first rewrite
    r = subprocess.run([str(BIN / 'prx_rewrite'), '--mds', str(root), '--out', str(root.parent / 'slim'), '--quiet'],
                       capture_output=True, text=True)  # into the existing --out: refused, naming it
    assert r.returncode == 1 and f"{root.parent / 'slim'}: holds a finished rewrite" in r.stderr
    subprocess.run([str(BIN / 'prx_rewrite'), '--mds', str(root), '--out', str(root.parent / 'slim'), '--quiet', '--overwrite'],
                   capture_output=True, text=True, check=True)  # rewritten whole
    (sb,) = list(iter_buckets(root.parent / 'slim'))
    got = set(served(sb)[0])
    stock = {x['id'] for x in StreamingDataset(local=str(sb), batch_size=1, shuffle=False)}
    assert not {'imgs/09.png', 'imgs/10.png'} & (got | stock) and len(got) == len(stock) == 22


def stream_remote(remote, cache):
    ds = SkipStreamingDataset(remote=str(remote), local=str(cache), batch_size=1)
    return [ds[i]['id'] for i in range(ds.num_samples)], ds


def test_streaming_from_a_remote_folder_applies_skip_lists_and_the_record_and_refreshes_them(tree, tmp_path):
    root, b, _ = tree
    optout(root, ['imgs/03.png'])
    skip_ids(root, 'dedup', ['imgs/04.png'])
    remote = tmp_path / 'bucket_store'
    shutil.copytree(root, remote)  # the tree as uploaded: a different folder from the cache
    rb = remote / b.relative_to(root)
    side = rb / next(rb.glob('*.skip.optout.json')).name
    side.unlink()  # the remote lost a list its record names: refused, naming it
    with pytest.raises(ValueError, match=f'{side.name}: missing'): stream_remote(rb, tmp_path / 'cache')
    optout(remote, ['imgs/03.png'])  # the list is back on the remote
    got, ds = stream_remote(rb, tmp_path / 'cache')
    assert not {'imgs/03.png', 'imgs/04.png'} & set(got) and ds.num_skipped == 2
    del ds
    optout(remote, ['imgs/05.png'])  # opted out on the remote after the cache was filled
    got, _ = stream_remote(rb, tmp_path / 'cache')
    assert 'imgs/05.png' not in got and 'imgs/04.png' not in got


@pytest.mark.slow
def test_streaming_from_an_s3_emulation_applies_skip_lists_and_the_record(tree, tmp_path, s3):
    root, b, _ = tree
    optout(root, ['imgs/06.png'])
    skip_ids(root, 'text', ['imgs/07.png'])
    s3(root, 'corpus', 'tree')
    got, ds = stream_remote(f's3://corpus/tree/{b.relative_to(root).as_posix()}', tmp_path / 's3cache')
    assert not {'imgs/06.png', 'imgs/07.png'} & set(got) and ds.num_skipped == 2 and len(got) == 24
    assert (tmp_path / 's3cache' / 'tree.optout.parquet').exists()


def test_a_stale_tree_is_applied_the_ledger_warned_about_and_synced(tree):
    root, b, _ = tree
    table = root.parent / 't.lance'
    other = root.parent / 'other'
    write_mds(str(table), other, progress=False)
    optout(other, ['imgs/11.png'])  # opted out through another tree: the ledger has it, this tree's record does not
    with pytest.warns(UserWarning, match='--sync'):
        assert 'imgs/11.png' not in served(b)[0]
    r = subprocess.run([str(BIN / 'prx_check'), '--mds', str(root), '--quiet'], capture_output=True, text=True)
    assert r.returncode == 1 and 'lacks 1 id(s) of the ledger' in r.stdout
    subprocess.run([str(BIN / 'prx_optout'), '--mds', str(root), '--sync'], check=True, capture_output=True)
    assert 'imgs/11.png' in pq.read_table(root / 'optout.parquet')['id'].to_pylist()
    assert any(b.glob('*.skip.optout.json'))
    r = subprocess.run([str(BIN / 'prx_check'), '--mds', str(root), '--quiet'], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip().endswith('sound'), r.stdout
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # no warning once synced
        served(b)


def shard_of(b):
    return b / json.loads((b / 'index.json').read_text())['shards'][0]['raw_data']['basename']


DAMAGE = {
    'index deleted': lambda b: (b / 'index.json').unlink(),
    'shard deleted': lambda b: shard_of(b).unlink(),
    'shard truncated': lambda b: shard_of(b).write_bytes(shard_of(b).read_bytes()[:1000]),
    'bytes flipped': lambda b: shard_of(b).write_bytes(bytes(x ^ 0xFF if i == 5000 else x for i, x in enumerate(shard_of(b).read_bytes()))),
    'manifest deleted': lambda b: (b / 'manifest.parquet').unlink(),
    'sidecar damaged': lambda b: next(b.glob('*.skip.optout.json')).write_text('{"indices": "1"}'),
    'sidecar renamed': lambda b: (s := next(b.glob('*.skip.optout.json'))).rename(s.with_suffix('.JSON')),
    'record damaged': lambda b: (b.parent.parent / 'optout.parquet').write_bytes(b'PAR1 not parquet'),
}
NAMED = {'index deleted': 'index.json', 'shard deleted': 'shard.00000.mds', 'shard truncated': 'shard.00000.mds',
         'bytes flipped': 'shard.00000.mds', 'manifest deleted': 'manifest.parquet', 'sidecar damaged': '.skip.optout.json',
         'sidecar renamed': '.skip.optout.JSON', 'record damaged': 'optout.parquet'}


@pytest.mark.parametrize('damage', list(DAMAGE))
def test_prx_check_reports_each_damage_with_its_file(tree, damage):
    root, b, _ = tree
    optout(root, ['imgs/12.png'])
    assert subprocess.run([str(BIN / 'prx_check'), '--mds', str(root), '--quiet'], capture_output=True).returncode == 0
    DAMAGE[damage](b)
    r = subprocess.run([str(BIN / 'prx_check'), '--mds', str(root), '--quiet'], capture_output=True, text=True)
    errors = [l for l in r.stdout.splitlines() if l.lstrip().startswith('error')]
    assert r.returncode == 1 and errors and any(NAMED[damage] in l for l in errors), r.stdout
    assert 'Traceback' not in r.stderr


@pytest.mark.parametrize('damage', ['index deleted', 'shard deleted', 'shard truncated', 'manifest deleted'])
def test_every_tool_stops_on_a_damaged_bucket_naming_the_file(tree, damage):
    root, b, w = tree
    table = root.parent / 't.lance'
    DAMAGE[damage](b)
    name = NAMED[damage]
    for cmd in (['prx_write_mds', '--table', str(table), '--out', str(root)], ['prx_rewrite', '--mds', str(root), '--out', str(root.parent / 'new')],
                ['prx_dedup', '--mds', str(root)], ['prx_skip_stats', '--mds', str(root)]):
        r = subprocess.run([str(BIN / cmd[0]), *cmd[1:], *(['--quiet'] if cmd[0] != 'prx_skip_stats' else [])], capture_output=True, text=True)
        assert r.returncode != 0 and name in r.stderr and 'Traceback' not in r.stderr, (cmd[0], r.stderr[-800:])
        assert 'already complete' not in r.stdout
    if damage != 'manifest deleted':  # the loader reads no manifest unless something is opted out
        with pytest.raises(Exception, match=name): served(b)


def test_a_rewrite_never_copies_flipped_bytes(tree):
    root, b, _ = tree
    DAMAGE['bytes flipped'](b)
    r = subprocess.run([str(BIN / 'prx_rewrite'), '--mds', str(root), '--out', str(root.parent / 'new'), '--quiet'], capture_output=True, text=True)
    assert r.returncode != 0 and 'SHA-1 differs' in r.stderr and not list(iter_buckets(root.parent / 'new'))


def test_a_bucket_that_lost_its_bucket_json_is_rebuilt_with_its_skip_lists(tree):
    root, b, w = tree
    optout(root, ['imgs/13.png'])
    skip_ids(root, 'dedup', ['imgs/14.png'])
    (b / 'bucket.json').unlink()
    w2 = write_mds(str(root.parent / 't.lance'), root, progress=False)
    assert not w2.buckets[next(iter(w2.buckets))].skipped_complete
    ids = pq.read_table(b / 'manifest.parquet')['id'].to_pylist()
    assert 'imgs/13.png' not in ids and len(ids) == 23  # the rebuild leaves the opted-out id out altogether
    (shard, idx), = read_skips(b, ['dedup']).items()
    assert [ids[i] for i in idx] == ['imgs/14.png']  # the dedup list, on the sample's new index
    assert 'imgs/14.png' not in served(b, reasons=['dedup'])[0]


def test_a_rewrite_leaves_out_a_bucket_whose_samples_are_all_skipped(tree):
    root, b, _ = tree
    skip_ids(root, 'text', [f'imgs/{i:02d}.png' for i in range(24)])
    r = subprocess.run([str(BIN / 'prx_rewrite'), '--mds', str(root), '--out', str(root.parent / 'new'), '--quiet'], capture_output=True, text=True)
    assert r.returncode == 0 and 'is left out of the new tree' in r.stderr and r.stdout.startswith('0 samples in 0 buckets')


def test_concurrent_column_fills_retry_commit_conflicts_and_lose_no_column(tmp_path):
    import lance, pyarrow as pa
    t = str(tmp_path / 'c.lance')
    lance.write_dataset(pa.table({'id': [str(i) for i in range(2000)], 'x': list(range(2000))}), t, max_rows_per_file=250)
    code = ("import sys, time, pyarrow as pa; from prx_nb.table import fill_column, Fill\n"
            "def fn(b):\n    time.sleep(0.01); return pa.array([v * 2 for v in b['x'].to_pylist()], pa.int64())\n"
            "fill_column(sys.argv[1], Fill(fn, sys.argv[2], read_columns=['x'], batch_size=50), progress=False)")
    ps = [subprocess.Popen([sys.executable, '-c', code, t, c], stderr=subprocess.PIPE, text=True) for c in 'abc']
    errs = [p.communicate(timeout=300)[1] for p in ps]
    assert all(p.returncode == 0 for p in ps), errs
    got = lance.dataset(t).to_table()
    assert all(got[c].to_pylist() == [2 * v for v in got['x'].to_pylist()] for c in 'abc')


def test_where_is_one_parenthesised_predicate_with_the_status_filter(tmp_path):
    d = tmp_path / 'imgs'; d.mkdir()
    for i in range(3): (d / f'{i}.png').write_bytes(picture(i)); (d / f'{i}.txt').write_text('a picture')
    (d / 'bad.png').write_bytes(b'not an image'); (d / 'bad.txt').write_text('broken')
    ingest(tmp_path / 't.lance', [f'folder:{d}'], progress=False)
    from prx_nb.mds import plan_buckets
    from prx_nb.bucket import Bucketer
    plan = plan_buckets(str(tmp_path / 't.lance'), Bucketer(), where="id = 'imgs/bad.png' OR id = 'imgs/0.png'")
    assert [i for t in plan.values() for i in t['id'].to_pylist()] == ['imgs/0.png']  # the failed row stays out
