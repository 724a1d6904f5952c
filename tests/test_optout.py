"""The opt-out promise on the reader paths prx_nb has today: whatever the reasons chosen, whatever happened to the
sidecars, and with several writers at once, an opted-out id is never served. (Remote streaming, a ledger kept with the
Lance table and `prx_check` are not built yet.)"""
import json, subprocess, sys
from pathlib import Path
import pyarrow.parquet as pq, pytest
from streaming import StreamingDataset
from conftest import BIN
from prx_nb.core import tiny_image
from prx_nb.ingest import ingest
from prx_nb.mds import write_mds, iter_buckets, read_optouts, read_ledger
from prx_nb.skips import SkipStreamingDataset, optout, skip_ids, read_skips
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
    from prx_nb.skips import read_ids
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
    subprocess.run([str(BIN / 'prx_rewrite'), '--mds', str(root), '--out', str(root.parent / 'slim'), '--quiet'],
                   capture_output=True, text=True, check=True)  # into the existing --out: its buckets are complete
    (sb,) = list(iter_buckets(root.parent / 'slim'))
    got = set(served(sb)[0])
    assert not {'imgs/09.png', 'imgs/10.png'} & got and len(got) == 22
