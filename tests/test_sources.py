"""Every layout producers write, ingested: each image one row, its caption where the layout has one, nothing dropped
silently. The inputs are written by the producers' own libraries (Hugging Face `datasets`, `webdataset`, the
img2dataset command) in their own environments, made by `./dev setup` (tests/.producers/)."""
import errno, functools, http.server, io, json, os, shutil, subprocess, sys, threading, urllib.parse
from pathlib import Path
import lance, pyarrow as pa, pyarrow.parquet as pq, pytest
from PIL import Image
from conftest import BIN
from prx_nb.core import Engine
from prx_nb.testing import tiny_image
from prx_nb.demo import gather_photos
from prx_nb.ingest import ingest, DiskFullError

HERE = Path(__file__).parent
ENVS = {'hf': HERE / '.producers' / 'hf' / 'bin' / 'python', 'img2dataset': HERE / '.producers' / 'img2dataset' / 'bin' / 'python'}


def table_rows(t):
    cols = ['id', 'key', 'status', 'reason', 'caption_source', 'captions', 'uri', 'image']
    return lance.dataset(str(t)).to_table(columns=cols).to_pylist()


@pytest.fixture(scope='session')
def photos(tmp_path_factory):
    "Eight real photos as small JPEGs (the producers' inputs)"
    d = tmp_path_factory.mktemp('photos')
    out = []
    for i, p in enumerate(sorted(gather_photos().glob("*.jpg"))[:8]):
        im = Image.open(p).convert('RGB'); im.thumbnail((320, 320))
        out.append(d / f'{i}.jpg'); im.save(out[-1], quality=90)
    return [str(p) for p in out]


@pytest.fixture(scope='session')
def layouts(tmp_path_factory, photos):
    "{layout name: (root folder, what it holds)}, written by the producers' libraries"
    got = {}
    for env, script in (('hf', 'hf_layouts.py'), ('img2dataset', 'img2dataset_layouts.py')):
        if not ENVS[env].exists(): pytest.skip(f'{ENVS[env].parent.parent} is missing: run ./dev setup')
        root = tmp_path_factory.mktemp(env)
        subprocess.run([str(ENVS[env]), str(HERE / 'producers' / script), str(root), *photos], check=True,
                       capture_output=True, timeout=600)
        got.update({k: (root, v) for k, v in json.loads((root / 'layouts.json').read_text()).items()})
    return got


LAYOUTS = ['hf_paths_abs', 'hf_paths_rel', 'hf_pil_from_files', 'hf_imagefolder_embedded', 'folder_metadata_jsonl',
           'folder_metadata_csv', 'wds_json_caption', 'wds_braces', 'wds_folder', 'hf_webdataset_parquet',
           'hf_save_to_disk', 'hf_save_to_disk_dict', 'coco_by_path', 'coco_embedded', 'img2dataset_files',
           'img2dataset_webdataset', 'img2dataset_parquet']


@pytest.mark.parametrize('name', LAYOUTS)
def test_every_layout_gives_each_image_one_row_with_its_captions(tmp_path, layouts, name):
    root, lay = layouts[name]
    kind, _, path = lay['spec'].partition(':')
    s = ingest(tmp_path / 't.lance', [f'src={kind}:{root / path}'], progress=False)
    rows = table_rows(tmp_path / 't.lance')
    ok = [r for r in rows if r['status'] == 'ok']
    assert len(ok) == lay['n'], [(r['id'], r['status'], r['reason']) for r in rows]
    assert len({r['id'] for r in rows}) == len(rows) and not any('//' in r['id'] for r in rows)
    assert all(r['image'] is not None or r['uri'] for r in ok)
    if lay['captions'] is not None:  # every caption the producer wrote, on the row of its image
        got = sorted(c for r in ok for c in (r['captions'] or [r['caption_source']]))
        assert got == sorted(lay['captions'])
        assert all(r['caption_source'] for r in ok)
    if lay.get('per_image'):
        assert all(len(r['captions']) == lay['per_image'] for r in ok) and s.merged == lay['n'] * (lay['per_image'] - 1)
    failed = [r for r in rows if r['status'] != 'ok']
    if lay.get('failed'):  # img2dataset's own reason, and the caption of the url that failed
        assert [(r['caption_source'], 'HTTP Error 404' in r['reason']) for r in failed] == [(lay['failed']['caption'], True)]
    else: assert failed == []
    again = ingest(tmp_path / 't.lance', [f'src={kind}:{root / path}'], progress=False)
    assert again.n_added == 0 and not again.replaced  # idempotent


def test_same_basenames_from_imagefolder_are_all_kept(tmp_path, layouts):
    root, lay = layouts['hf_imagefolder_embedded']
    s = ingest(tmp_path / 't.lance', [f'parquet:{root}/hf_imagefolder'], progress=False)
    assert (s.n_added, s.rekeyed, s.duplicate_keys) == (8, 8, 0)  # cat/0.jpg and dog/0.jpg, both 0.jpg
    keys = [r['key'] for r in table_rows(tmp_path / 't.lance')]
    assert sorted(keys) == sorted(f'data/train-00000-of-00001.parquet:{i}' for i in range(8))


def test_img2dataset_outputs_leave_out_their_own_metadata_files_and_say_so(tmp_path, layouts):
    root, _ = layouts['img2dataset_webdataset']
    s = ingest(tmp_path / 't.lance', [f'wds:{root}/i2d_wds/*'], progress=False)  # the glob matches .parquet and _stats.json
    assert sorted(Path(f).name for f in s.left_out) == ['00000.parquet', '00000_stats.json']
    assert all(r['status'] == 'ok' for r in table_rows(tmp_path / 't.lance'))
    out = subprocess.run([str(BIN / 'prx_ingest'), f'folder:{root}/i2d_files', '--table', str(tmp_path / 'f.lance'), '--quiet'],
                         capture_output=True, text=True, check=True).stdout
    assert '2 files not read' in out and '00000.parquet' in out


def test_caption_column_override_and_its_errors(tmp_path, layouts):
    root, lay = layouts['hf_webdataset_parquet']
    ingest(tmp_path / 't.lance', [f'parquet:{root}/hf_wds/train.parquet'], caption_column='json.caption', progress=False)
    assert sorted(r['caption_source'] for r in table_rows(tmp_path / 't.lance')) == sorted(lay['captions'])
    r = subprocess.run([str(BIN / 'prx_ingest'), f'parquet:{root}/hf_wds/train.parquet', '--table', str(tmp_path / 'u.lance'),
                        '--caption-column', 'alt_text'], capture_output=True, text=True)
    assert r.returncode != 0 and "train.parquet: no caption column 'alt_text'" in r.stderr and 'Traceback' not in r.stderr
    wroot, wlay = layouts['wds_braces']
    ingest(tmp_path / 'w.lance', [f'wds:{wroot}/wds'], caption_column='json.caption', progress=False)
    assert sorted(r['caption_source'] for r in table_rows(tmp_path / 'w.lance')) == sorted(wlay['captions'])


def test_specs_that_point_at_the_wrong_thing_say_which_file(tmp_path):
    d = tmp_path / 'mixed'; d.mkdir()
    pq.write_table(pa.table({'jpg': [tiny_image()], 'caption': ['fine']}), d / 'a.parquet')
    (d / 'b.parquet').write_bytes(b'PAR1 this download was cut')
    (d / 'notes.txt').write_text('not data')
    s = ingest(tmp_path / 't.lance', [f'parquet:{d}'], progress=False)  # a folder: every .parquet under it
    rows = {r['key']: r for r in table_rows(tmp_path / 't.lance')}
    assert rows['a.parquet:0']['status'] == 'ok' and [Path(f).name for f in s.left_out] == ['notes.txt']
    assert rows['b.parquet:unreadable']['status'] == 'unreadable' and str(d / 'b.parquet') in rows['b.parquet:unreadable']['reason']
    for spec, want in [(f'wds:{d}', 'no .tar/.tar.gz/.tgz file among what it matches (a.parquet, b.parquet, notes.txt)'),
                       (f'wds:{d}/*.tar', 'nothing matches'), (f'hf:{d}', 'not a Dataset.save_to_disk folder'),
                       (f'parquet:{d}/x-{{0..3}}.parquet', 'nothing matches')]:
        r = subprocess.run([str(BIN / 'prx_ingest'), spec, '--table', str(tmp_path / 'u.lance')], capture_output=True, text=True)
        assert r.returncode != 0 and want in r.stderr and 'Traceback' not in r.stderr, (spec, r.stderr)


def test_failed_rows_are_read_again_when_fixed_and_ok_rows_never(tmp_path):
    d = tmp_path / 'imgs'; d.mkdir()
    good, whole = tiny_image(300, 200), tiny_image(320, 240)
    (d / 'good.jpg').write_bytes(good); (d / 'cut.jpg').write_bytes(whole[:len(whole) // 2])
    t = tmp_path / 't.lance'
    ingest(t, [f'folder:{d}'], progress=False)
    assert {r['key']: r['status'] for r in table_rows(t)} == {'good.jpg': 'ok', 'cut.jpg': 'truncated'}
    s = ingest(t, [f'folder:{d}'], progress=False)  # unchanged: read, compared, kept
    assert (s.n_added, s.already_present, sum(s.replaced.values())) == (0, 2, 0)
    (d / 'cut.jpg').write_bytes(whole); (d / 'good.jpg').write_bytes(b'')  # fixed; and an ok file damaged later
    s = ingest(t, [f'folder:{d}'], progress=False)
    got = {r['key']: r for r in table_rows(t)}
    assert dict(s.replaced) == {('imgs', 'ok'): 1} and len(got) == 2
    assert got['cut.jpg']['status'] == 'ok' and got['good.jpg']['status'] == 'ok'  # an ok row is never read again
    bad = tmp_path / 'bad'; bad.mkdir(); (bad / 'x.jpg').write_bytes(whole[:len(whole) // 2])
    ingest(t, [f'folder:{bad}'], progress=False)
    s = ingest(t, [f'folder:{bad}'], retry_failed=True, progress=False)  # --retry-failed: re-probed though unchanged
    assert dict(s.replaced) == {('bad', 'truncated'): 1} and lance.dataset(str(t)).count_rows() == 3


@pytest.mark.slow
def test_failed_rows_are_read_again_on_the_ray_path(tmp_path):
    d = tmp_path / 'imgs'; d.mkdir()
    whole = tiny_image(320, 240)
    (d / 'cut.jpg').write_bytes(whole[:len(whole) // 2]); (d / 'ok.png').write_bytes(tiny_image(fmt='PNG'))
    t = tmp_path / 't.lance'
    ingest(t, [f'folder:{d}'], progress=False)
    (d / 'cut.jpg').write_bytes(whole)
    s = ingest(t, [f'folder:{d}'], engine=Engine('ray', workers=2), progress=False)
    assert dict(s.replaced) == {('imgs', 'ok'): 1} and sorted(r['status'] for r in table_rows(t)) == ['ok', 'ok']


@pytest.mark.slow
def test_ray_path_gives_the_same_rows_for_every_layout(tmp_path, layouts):
    specs = []
    for name in ('coco_embedded', 'hf_imagefolder_embedded', 'folder_metadata_jsonl', 'wds_braces', 'hf_save_to_disk_dict'):
        root, lay = layouts[name]; kind, _, path = lay['spec'].partition(':'); specs.append(f'{name}={kind}:{root / path}')
    ingest(tmp_path / 'a.lance', specs, progress=False)
    ingest(tmp_path / 'b.lance', specs, engine=Engine('ray', workers=2), progress=False)
    a, b = (sorted(table_rows(tmp_path / t), key=lambda r: r['id']) for t in ('a.lance', 'b.lance'))
    assert a == b and len(a) == 3 + 8 + 3 + 7 + 5


def test_a_file_name_that_is_not_utf8_becomes_a_row(tmp_path):
    d = tmp_path / 'imgs'; d.mkdir()
    raw = os.fsencode(str(d)) + b'/caf\xff.jpg'
    with open(raw, 'wb') as f: f.write(tiny_image())
    (d / 'plain.jpg').write_bytes(tiny_image())
    ingest(tmp_path / 't.lance', [f'folder:{d}'], progress=False)
    rows = {r['key']: r for r in table_rows(tmp_path / 't.lance')}
    assert sorted(rows) == ['caf%FF.jpg', 'plain.jpg'] and rows['caf%FF.jpg']['status'] == 'ok'
    assert 'not valid UTF-8' in rows['caf%FF.jpg']['reason']
    assert d.joinpath(os.fsdecode(urllib.parse.unquote_to_bytes('caf%FF.jpg'))).read_bytes() == tiny_image()  # reversible


def test_a_tar_member_name_that_is_not_utf8_becomes_a_row(tmp_path):
    import tarfile
    (tmp_path / 'w').mkdir()
    with tarfile.open(tmp_path / 'w' / '00000.tar', 'w', format=tarfile.GNU_FORMAT, encoding='utf-8', errors='surrogateescape') as tf:
        for name, data in ((os.fsdecode(b'caf\xff.jpg'), tiny_image()), (os.fsdecode(b'caf\xff.txt'), b'a cafe')):
            ti = tarfile.TarInfo(name); ti.size = len(data); tf.addfile(ti, io.BytesIO(data))
    ingest(tmp_path / 't.lance', [f'wds:{tmp_path}/w'], progress=False)
    rows = table_rows(tmp_path / 't.lance')
    assert [(r['key'], r['status'], r['caption_source']) for r in rows] == [('caf%FF', 'ok', 'a cafe')]


def test_metadata_table_of_http_urls(tmp_path):
    (tmp_path / 'www').mkdir(); (tmp_path / 'www' / 'a.jpg').write_bytes(tiny_image(400, 300))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / 'www'))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f'http://127.0.0.1:{srv.server_address[1]}'
    try:
        pq.write_table(pa.table({'url': [f'{base}/a.jpg', f'{base}/gone.jpg'], 'caption': ['a', 'b']}), tmp_path / 'urls.parquet')
        ingest(tmp_path / 't.lance', [f'meta:{tmp_path}/urls.parquet'], progress=False)
    finally: srv.shutdown(); srv.server_close()
    rows = sorted(table_rows(tmp_path / 't.lance'), key=lambda r: r['key'])
    assert [(r['key'].split('/', 1)[1], r['status']) for r in rows] == [('a.jpg', 'ok'), ('gone.jpg', 'unreadable')]
    assert 'HTTP Error 404' in rows[1]['reason'] and 'gone.jpg' in rows[1]['reason']


def test_avif_is_accepted(tmp_path):
    d = tmp_path / 'imgs'; d.mkdir(); (d / 'phone.avif').write_bytes(tiny_image(64, 48, 'AVIF'))
    ingest(tmp_path / 't.lance', [f'folder:{d}'], progress=False)
    assert [(r['key'], r['status']) for r in table_rows(tmp_path / 't.lance')] == [('phone.avif', 'ok')]


@pytest.fixture
def small_disk(tmp_path):
    "A 3 MiB tmpfs (root only)"
    m = tmp_path / 'disk'; m.mkdir()
    if os.geteuid() != 0 or subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=3m', 'tmpfs', str(m)]).returncode:
        pytest.skip('mounting a small tmpfs needs root: the full-disk case is not exercised here')
    yield m
    subprocess.run(['umount', str(m)])


def test_a_full_disk_ends_the_run_in_one_line_and_keeps_the_table(tmp_path, small_disk):
    d = tmp_path / 'imgs'; d.mkdir()
    rng = __import__('numpy').random.default_rng(0)
    for i in range(40):  # incompressible PNGs, ~200 KB each: 8 MB in all, the disk holds 3
        b = io.BytesIO(); Image.fromarray(rng.integers(0, 255, (256, 256, 3), 'uint8')).save(b, 'PNG'); (d / f'{i:02d}.png').write_bytes(b.getvalue())
    t = small_disk / 't.lance'
    r = subprocess.run([str(BIN / 'prx_ingest'), f'folder:{d}', '--table', str(t), '--commit-rows', '4', '--quiet'],
                       capture_output=True, text=True)
    assert r.returncode != 0 and 'Traceback' not in r.stderr, r.stderr
    assert r.stderr.strip().count('\n') == 0 and 'no space left on the device' in r.stderr and str(t) in r.stderr
    n = lance.dataset(str(t)).count_rows()  # what was committed is intact and readable
    assert 0 < n < 40 and all(x['status'] == 'ok' for x in table_rows(t)) and f'({n:,} rows)' in r.stderr
