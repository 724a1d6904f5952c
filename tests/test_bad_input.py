"The bad-input corpus: one row per file with a reason, no crash, nothing good lost."
import io, json, tarfile
import lance, pyarrow as pa, pyarrow.parquet as pq
from prx_nb.core import STATUS
from prx_nb.testing import tiny_image
from prx_nb.ingest import ingest


def rows(table):
    return {r['key']: r for r in lance.dataset(str(table)).to_table(columns=['key', 'status', 'reason', 'width', 'height', 'caption_source', 'captions']).to_pylist()}


def test_every_bad_file_gets_its_status(tmp_path, bad_dir):
    s = ingest(tmp_path / 't.lance', [f'folder:{bad_dir}'], progress=False)
    got = rows(tmp_path / 't.lance')
    files = sorted(p.name for p in bad_dir.iterdir())
    assert sorted(got) == files and s.n_added == len(files)
    for name, r in got.items():
        assert r['status'] == name.split('__')[0], (name, r)
        assert r['status'] in STATUS
        assert (r['status'] == 'ok') == (r['reason'] == ''), r
    assert (got['ok__exif_rotated_300x400.jpg']['width'], got['ok__exif_rotated_300x400.jpg']['height']) == (300, 400)
    assert got['too_many_pixels__bomb_100k_x_100k.png']['width'] == 100_000  # declared size recorded, never decoded


def test_metadata_table_with_unreadable_locations(tmp_path):
    (tmp_path / 'store').mkdir(); (tmp_path / 'store' / 'a.jpg').write_bytes(tiny_image(500, 400))
    (tmp_path / 'store' / 'adir.jpg').mkdir()
    uris = ['store/a.jpg', 'store/missing.jpg', 'store/adir.jpg', str(tmp_path / 'store' / 'a.jpg')]
    pq.write_table(pa.table({'uri': uris, 'caption': ['a', 'b', 'c', 'd']}), tmp_path / 'cat.parquet')
    ingest(tmp_path / 't.lance', [f'meta:{tmp_path}/cat.parquet'], progress=False)
    got = rows(tmp_path / 't.lance')
    # the absolute location names the same file as the first row: one image, both captions kept, no double slash
    assert sorted(got) == ['store/a.jpg', 'store/adir.jpg', 'store/missing.jpg']
    assert [got[u]['status'] for u in uris[:3]] == ['ok', 'unreadable', 'unreadable']
    assert (got['store/a.jpg']['caption_source'], got['store/a.jpg']['captions']) == ('a', ['a', 'd'])
    assert 'FileNotFoundError' in got['store/missing.jpg']['reason'] and 'IsADirectoryError' in got['store/adir.jpg']['reason']
    t = lance.dataset(str(tmp_path / 't.lance')).to_table(columns=['image', 'uri']).to_pylist()
    assert all(r['image'] is None and r['uri'] for r in t)  # metadata-only: bytes stay where they are


def add(tf, name, data):
    info = tarfile.TarInfo(name); info.size = len(data); tf.addfile(info, io.BytesIO(data))


def test_webdataset_bad_members_and_broken_tar(tmp_path):
    (tmp_path / 'w').mkdir()
    with tarfile.open(tmp_path / 'w' / '00000.tar', 'w') as tf:
        add(tf, '000.jpg', tiny_image(600, 400)); add(tf, '000.txt', b'a photo'); add(tf, '000.json', b'{"key": "000"}')
        add(tf, '001.txt', b'caption without an image')
        add(tf, '002.jpg', b'<html>403 Forbidden</html>'); add(tf, '002.json', json.dumps({'caption': 'from json'}).encode())
    (tmp_path / 'w' / '00001.tar').write_bytes(b'this is not a tar archive' * 40)
    ingest(tmp_path / 't.lance', [f'wds:{tmp_path}/w/*.tar'], progress=False)
    got = rows(tmp_path / 't.lance')
    assert {k: r['status'] for k, r in got.items()} == {'000': 'ok', '001': 'unreadable', '002': 'not_image', '00001.tar:unreadable': 'unreadable'}
    t = lance.dataset(str(tmp_path / 't.lance')).to_table(columns=['key', 'caption_source']).to_pylist()
    caps = {r['key']: r['caption_source'] for r in t}
    assert caps['000'] == 'a photo' and caps['002'] == 'from json'


def test_parquet_null_bytes_and_plain_binary_column(tmp_path):
    pq.write_table(pa.table({'jpg': pa.array([tiny_image(500, 500), None], pa.binary()), 'caption': ['x', 'y']}), tmp_path / 'p.parquet')
    ingest(tmp_path / 't.lance', [f'parquet:{tmp_path}/p.parquet'], progress=False)
    got = rows(tmp_path / 't.lance')
    assert {k: r['status'] for k, r in got.items()} == {'p.parquet:0': 'ok', 'p.parquet:1': 'unreadable'}


def test_metadata_table_as_csv_and_jsonl(tmp_path):
    (tmp_path / 'a.jpg').write_bytes(tiny_image(500, 400))
    (tmp_path / 'cat.csv').write_text('uri,caption\na.jpg,a photo\nmissing.jpg,gone\n')
    (tmp_path / 'cat.jsonl').write_text(json.dumps({'url': 'a.jpg', 'text': 'a photo'}) + '\n')
    ingest(tmp_path / 't.lance', [f'csv=meta:{tmp_path}/cat.csv', f'jl=meta:{tmp_path}/cat.jsonl'], progress=False)
    got = {r['id']: r['status'] for r in lance.dataset(str(tmp_path / 't.lance')).to_table(columns=['id', 'status']).to_pylist()}
    assert got == {'csv/a.jpg': 'ok', 'csv/missing.jpg': 'unreadable', 'jl/a.jpg': 'ok'}
