"""The opt-out promise from any working folder, and damage that ends in one error naming the file or object: relative
table paths, a ledger never read torn, recorded sidecars, lost bucket.json, damaged shard headers and bytes, remote
objects missing or damaged in an S3 emulation (no short epoch), a rewrite into a used folder, prx_run's checks."""
import json, os, shutil, subprocess, sys, time, warnings
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq, pytest
from prx_nb.demo import demo_sources
from prx_nb.ingest import ingest
from prx_nb.tree import iter_buckets, bucket_key, ledger_path, SKIP_RECORD, read_ledger, read_skips
from prx_nb.mds import write_mds
from prx_nb.skips import skip_ids, optout, check_tree, rewrite, _add_to_ledger
from prx_nb.loader import SkipStreamingDataset
from prx_nb.dedup import dedup_tree
from prx_nb.loader import tree_dataset

BIN = Path(sys.executable).parent


def served(root, **kw):
    "Every id one epoch of `tree_dataset` serves (one process, no workers)"
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        ds = tree_dataset(root, batch_size=1, shuffle=False, **kw)
    return [x['id'] for x in ds]


def cli(name, *args, cwd):
    return subprocess.run([str(BIN / name), *map(str, args)], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope='module')
def rel(tmp_path_factory, demo):
    "A run folder written as prx_run and ./dev demo write it: the table and the tree given by relative paths"
    d = tmp_path_factory.mktemp('rel')
    cwd = os.getcwd()
    os.chdir(d)
    try:
        ingest('prx_out/corpus.lance', demo_sources(demo), progress=False)
        write_mds('prx_out/corpus.lance', 'prx_out/mds', shard_bytes=1 << 20, progress=False)
    finally: os.chdir(cwd)
    man = {bucket_key(b): pq.read_table(b / 'manifest.parquet').column('id').to_pylist() for b in iter_buckets(d / 'prx_out/mds')}
    return d, man


@pytest.fixture
def tree(rel, tmp_path):
    "A private copy of the relative run folder (its table and tree), and the bucket → ids map"
    d, man = rel
    shutil.copytree(d / 'prx_out', tmp_path / 'prx_out')
    return tmp_path, tmp_path / 'prx_out' / 'mds', man


def test_the_tree_records_its_table_absolute_and_optouts_hold_from_any_folder(tree):
    d, root, man = tree
    meta = json.loads(next(root.glob('*/*/bucket.json')).read_text())
    assert os.path.isabs(meta["table"]) and meta["table_from_tree"] == "../corpus.lance"
    (d / 'elsewhere').mkdir(); (d / 'third').mkdir()
    gone = next(iter(man.values()))[0]
    (d / 'ids.txt').write_text(gone + '\n')
    r = cli('prx_optout', '--mds', '../prx_out/mds', '--ids', '../ids.txt', cwd=d / 'elsewhere')
    assert r.returncode == 0, r.stderr
    assert not list((d / 'elsewhere').glob('**/*.parquet'))  # one ledger, beside the table, whatever the folder
    assert read_ledger(d / 'prx_out' / 'corpus.lance') == {gone}
    cwd = os.getcwd()
    try:
        os.chdir(d / 'third')
        assert gone not in served('../prx_out/mds') and len(served('../prx_out/mds'))
    finally: os.chdir(cwd)
    assert cli('prx_check', '--mds', root, '--no-hashes', '--quiet', cwd=d / 'third').returncode == 0


def test_a_tree_written_before_absolute_paths_finds_its_ledger_from_any_folder(tree):
    d, root, man = tree
    for bj in root.glob('*/*/bucket.json'):  # as trees written before this change recorded it: relative to the writer's folder
        m = json.loads(bj.read_text()); m['table'] = 'prx_out/corpus.lance'; bj.write_text(json.dumps(m))
    gone = next(iter(man.values()))[0]
    _add_to_ledger(str(d / 'prx_out' / 'corpus.lance'), [gone])  # opted out with another tree: in the ledger only
    (d / 'elsewhere').mkdir()
    for cwd in (d, d / 'elsewhere', root):
        r = cli('prx_check', '--mds', root, '--no-hashes', '--quiet', cwd=cwd)
        assert r.returncode == 1 and 'lacks 1 id(s) of the ledger' in r.stdout, (cwd, r.stdout)
        here = os.getcwd()
        try:
            os.chdir(cwd)
            with pytest.warns(UserWarning, match='lacks 1 id'): ds = tree_dataset(root, batch_size=1, shuffle=False)
            assert gone not in [x['id'] for x in ds]
        finally: os.chdir(here)
    r = cli('prx_optout', '--mds', root, '--sync', cwd=d / 'elsewhere')
    assert r.returncode == 0 and not list((d / 'elsewhere').glob('*')), r.stderr
    assert cli('prx_check', '--mds', root, '--no-hashes', '--quiet', cwd=d / 'elsewhere').returncode == 0


RACE = '''
import os, sys, time, pyarrow as pa, pyarrow.parquet as pq
p, stop = sys.argv[1], time.time() + float(sys.argv[2])
n = 0
while time.time() < stop:  # whole files of different sizes, each through a temporary file and os.replace, as the ledger is
    n += 1
    t = pa.table({'id': [f'id{i:07d}' for i in range(1000 + (n % 7) * 3000)]})
    pq.write_table(t, p + '.tmp', row_group_size=500); os.replace(p + '.tmp', p)
'''


@pytest.mark.slow
def test_ledger_readers_never_see_a_torn_file_while_it_is_replaced(tmp_path):
    from prx_nb.tree import read_id_column
    p = tmp_path / 't.lance.optouts.parquet'
    pq.write_table(pa.table({'id': ['a']}), p)
    w = subprocess.Popen([sys.executable, '-c', RACE, str(p), '6'])
    reads, torn, stock = 0, 0, 0
    try:
        while w.poll() is None:
            try: read_id_column(p, 'opt-out ledger'); reads += 1
            except ValueError: torn += 1
            try: pq.read_table(p, columns=['id'])  # pyarrow given the path: the way that tore
            except Exception: stock += 1
    finally: w.wait()
    assert reads > 100 and torn == 0, (reads, torn, stock)


@pytest.mark.slow
def test_four_concurrent_optouts_all_succeed_while_readers_read(tree):
    d, root, man = tree
    ids = [i for v in man.values() for i in v][:8]
    files = []
    for n in range(4):
        (d / f'ids{n}.txt').write_text('\n'.join(ids[2 * n:2 * n + 2]) + '\n'); files.append(d / f'ids{n}.txt')
    procs = [subprocess.Popen([str(BIN / 'prx_optout'), '--mds', str(root), '--ids', str(f)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for f in files]
    reader_errors = 0
    while any(p.poll() is None for p in procs):
        try: read_ledger(d / 'prx_out' / 'corpus.lance')
        except ValueError: reader_errors += 1
    outs = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert reader_errors == 0 and read_ledger(d / 'prx_out' / 'corpus.lance') == set(ids)
    assert not set(served(root)) & set(ids)


def flip(p, at, n=4):
    b = bytearray(p.read_bytes())
    for i in range(at, at + n): b[i] ^= 0xFF
    p.write_bytes(bytes(b))


def test_a_damaged_shard_header_is_named_by_every_reader_and_verb(tree):
    d, root, man = tree
    shard = next(root.glob('*/*/shard.00000.mds'))
    flip(shard, 4)  # the offset table: stock readers fail with IndexError, naming nothing
    with pytest.raises(ValueError, match=f'{shard}: its offset table is damaged'): tree_dataset(root, batch_size=1)
    with pytest.raises(ValueError, match=f'{shard}: its offset table'): SkipStreamingDataset(local=str(shard.parent), batch_size=1)
    for verb in (['prx_dedup', '--mds', root, '--quiet'], ['prx_check', '--mds', root, '--quiet', '--no-hashes']):
        r = cli(*verb, cwd=d)
        assert r.returncode != 0 and str(shard) in r.stdout + r.stderr and 'Traceback' not in r.stderr, r.stderr


def test_flipped_sample_bytes_are_found_with_validate_hash(tree):
    d, root, man = tree
    shard = next(root.glob('*/*/shard.00000.mds'))
    flip(shard, shard.stat().st_size - 100)  # inside the last sample's JPEG: only its SHA-1 tells
    assert len(served(root))  # by default local shards are checked by size and header only
    with pytest.raises(ValueError, match=f'{shard}: SHA-1 differs'): tree_dataset(root, batch_size=1, validate_hash=True)
    r = cli('prx_check', '--mds', root, '--quiet', cwd=d)
    assert r.returncode == 1 and 'SHA-1 differs' in r.stdout


def test_a_bucket_that_lost_its_bucket_json_is_an_error_not_an_absence(tree):
    d, root, man = tree
    b = root / next(iter(man))
    (b / 'bucket.json').unlink()
    with pytest.raises(ValueError, match=f'{b / "bucket.json"}: missing'): tree_dataset(root, batch_size=1)
    for verb in (['prx_dedup', '--mds', root, '--quiet'], ['prx_skip_stats', '--mds', root], ['prx_check', '--mds', root, '--quiet']):
        r = cli(*verb, cwd=d)
        assert r.returncode != 0 and str(b / 'bucket.json') in r.stdout + r.stderr and 'Traceback' not in r.stderr, (verb, r.stdout, r.stderr)


def test_a_lost_sidecar_of_any_reason_is_an_error_for_the_readers_that_apply_it(tree):
    d, root, man = tree
    k = max(man, key=lambda k: len(man[k]))
    skip_ids(root, 'dedup', man[k][:2])
    skip_ids(root, 'text', man[k][2:3])
    side = next((root / k).glob('*.skip.dedup.json'))
    assert json.loads((root / k / SKIP_RECORD).read_text())['sidecars']
    side.unlink()
    with pytest.raises(ValueError, match=f'{side}: missing'): tree_dataset(root, batch_size=1)
    with pytest.raises(ValueError, match=f'{side}: missing'): read_skips(root / k)
    got = served(root, reasons=['text'])  # a reader that leaves dedup out does not need its list
    assert man[k][2] not in got and man[k][0] in got
    r = cli('prx_check', '--mds', root, '--quiet', '--no-hashes', cwd=d)
    assert r.returncode == 1 and f'{side}: missing' in r.stdout
    dedup_tree(root, progress=False)  # the verb that owns the reason rebuilds its lists
    assert not (check_tree(root, hashes=False).level == 'error').any() and len(served(root))


def test_dedup_removes_what_a_killed_dedup_left(tree):
    d, root, man = tree
    b = root / next(iter(man))
    stray = b / 'shard.00000.mds.skip.dedup.json.tmp999999'  # a dead process's half-written sidecar
    stray.write_text('{"ind')
    dedup_tree(root, progress=False)
    assert not stray.exists()


def test_a_rewrite_into_a_used_folder_refuses_or_rewrites_whole(tree):
    d, root, man = tree
    rewrite(root, d / 'new', progress=False)
    gone = next(iter(man.values()))[0]
    optout(root, [gone])
    with pytest.raises(ValueError, match=f'{d / "new"}: holds a finished rewrite'): rewrite(root, d / 'new', progress=False)
    r = cli('prx_rewrite', '--mds', root, '--out', d / 'new', '--quiet', cwd=d)
    assert r.returncode == 1 and 'holds a finished rewrite' in r.stderr
    r = cli('prx_rewrite', '--mds', root, '--out', d / 'new', '--quiet', '--overwrite', cwd=d)
    assert r.returncode == 0, r.stderr
    from streaming import StreamingDataset
    stock = [x['id'] for b in iter_buckets(d / 'new') for x in StreamingDataset(local=str(b), batch_size=1, shuffle=False)]
    assert gone not in stock and len(stock) == sum(map(len, man.values())) - 1
    (d / 'other').mkdir(); (d / 'other' / 'keep.txt').write_text('mine')
    with pytest.raises(ValueError, match='files that no rewrite wrote'): rewrite(root, d / 'other', progress=False)
    assert (d / 'other' / 'keep.txt').exists()
    with pytest.raises(ValueError, match='cannot be the tree'): rewrite(root, root / 'sub', progress=False, overwrite=True)


# ---- remote trees (an S3 emulation on 127.0.0.1) ----

def s3_objects():
    import boto3
    return boto3.client('s3', endpoint_url=os.environ['S3_ENDPOINT_URL'])


@pytest.mark.slow
@pytest.mark.parametrize('damage', ['shard_deleted', 'index_deleted', 'manifest_deleted', 'shard_truncated', 'shard_flipped',
                                    'bucket_json_deleted'])
def test_a_damaged_remote_tree_stops_with_one_error_naming_the_object(tree, s3, tmp_path, damage):
    d, root, man = tree
    s3(root, 'corpus', 'tree')
    c = s3_objects()
    k = max(man, key=lambda k: len(man[k]))
    key = {'shard_deleted': 'shard.00001.mds', 'shard_truncated': 'shard.00001.mds', 'shard_flipped': 'shard.00001.mds',
           'index_deleted': 'index.json', 'manifest_deleted': 'manifest.parquet', 'bucket_json_deleted': 'bucket.json'}[damage]
    obj = f'tree/{k}/{key}'
    if damage.endswith('deleted'): c.delete_object(Bucket='corpus', Key=obj)
    else:
        data = bytearray((root / k / key).read_bytes())
        if damage == 'shard_truncated': data = data[:len(data) // 2]
        else:
            for i in range(len(data) - 200, len(data) - 196): data[i] ^= 0xFF
        c.put_object(Bucket='corpus', Key=obj, Body=bytes(data))
    with pytest.raises(ValueError) as e:
        n = len(served('s3://corpus/tree', local=str(tmp_path / 'cache')))
        pytest.fail(f'{damage}: an epoch of {n} samples ended without an error')
    assert f's3://corpus/{obj}' in str(e.value), str(e.value)


# ---- prx_run: every value checked before a stage runs; opt-outs applied before the tree is written ----

def run_config(tmp_path, demo, **sections):
    from prx_nb.demo import demo_sources
    from prx_nb.pipeline import config_text
    c = dict(run=dict(out=str(tmp_path / 'out')), ingest=dict(sources=demo_sources(demo)), explore=dict(enabled=False),
             classify=dict(caption_column='caption_source'), mds=dict(part_rows=8)) | sections
    p = tmp_path / 'run.toml'
    p.write_text(config_text(c))
    return p


@pytest.mark.parametrize('bad, key', [
    (dict(mds=dict(part_rows=0)), 'mds.part_rows'),
    (dict(mds=dict(shard_bytes=-1)), 'mds.shard_bytes'),
    (dict(mds=dict(where='garbage where (')), 'mds.where'),
    (dict(mds=dict(caption_column='caption_nope')), 'mds.caption_column'),
    (dict(optout=dict(ids='LATIN1')), 'optout.ids'),
    (dict(ingest=dict(sources=['folder:EMPTY'])), 'ingest.sources')])
def test_prx_run_checks_every_value_before_any_stage_writes(tmp_path, demo, bad, key):
    (tmp_path / 'empty').mkdir()
    (tmp_path / 'latin1.txt').write_bytes('café_1\n'.encode('latin-1'))
    subst = {'LATIN1': str(tmp_path / 'latin1.txt'), 'folder:EMPTY': f'folder:{tmp_path / "empty"}'}
    bad = json.loads(json.dumps(bad).replace('"LATIN1"', json.dumps(subst['LATIN1'])).replace('"folder:EMPTY"', json.dumps(subst['folder:EMPTY'])))
    from prx_nb.pipeline import run_pipeline
    cfg = run_config(tmp_path, demo, **bad)
    with pytest.raises(ValueError, match=key.replace('.', r'\.')) as e: run_pipeline(cfg, progress=False)
    assert not (tmp_path / 'out' / 'corpus.lance').exists()  # no stage ran
    if key == 'optout.ids':  # the file named; from the shell, one line and no traceback
        assert str(tmp_path / 'latin1.txt') in str(e.value)
        r = subprocess.run([str(BIN / 'prx_run'), str(cfg), '--quiet'], capture_output=True, text=True)
        assert r.returncode != 0 and 'optout.ids' in r.stderr and 'Traceback' not in r.stderr, r.stderr


@pytest.mark.slow
def test_prx_run_never_writes_the_configured_optouts_into_the_tree(tmp_path, demo):
    from prx_nb.demo import demo_sources
    from prx_nb.sources import parse_source
    import lance
    cfg = run_config(tmp_path, demo, dedup=dict(enabled=False), classify=dict(enabled=False), filter=dict(enabled=False),
                     profile=dict(enabled=False))
    r = subprocess.run([str(BIN / 'prx_run'), str(cfg), '--quiet'], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ids = sorted(lance.dataset(str(tmp_path / 'out' / 'corpus.lance')).to_table(columns=['id'], filter="status = 'ok'")['id'].to_pylist())[:3]
    (tmp_path / 'ids.txt').write_text('\n'.join(ids) + '\n')
    shutil.rmtree(tmp_path / 'out' / 'mds')
    cfg = run_config(tmp_path, demo, dedup=dict(enabled=False), classify=dict(enabled=False), filter=dict(enabled=False),
                     profile=dict(enabled=False), optout=dict(ids=str(tmp_path / 'ids.txt')))
    r = subprocess.run([str(BIN / 'prx_run'), str(cfg), '--quiet'], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    in_tree = {i for b in iter_buckets(tmp_path / 'out' / 'mds') for i in pq.read_table(b / 'manifest.parquet')['id'].to_pylist()}
    assert in_tree and not in_tree & set(ids)  # the shards never held them: no reader, stock or ours, can serve them
    s = json.loads((tmp_path / 'out' / 'summary.json').read_text())
    names = [st['name'] if isinstance(st, dict) else st for st in s.get('stages', [])]
    assert not names or names.index('optout') < names.index('mds')
