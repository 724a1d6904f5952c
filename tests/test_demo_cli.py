"""The README's main command end to end: `prx_demo` on a fresh folder, then the corpus it leaves is searchable from a shell."""
import json, subprocess, sys
from pathlib import Path

BIN = Path(sys.executable).parent


def test_prx_demo_then_search(tmp_path):
    out = subprocess.run([BIN / 'prx_demo', '--out', str(tmp_path / 'demo'), '--quiet'], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert 'searchable: prx_search' in out.stdout and 'distinct photos skipped: 0' in out.stdout
    assert 'filter: ' in out.stdout and 'planted text images skipped: ' in out.stdout      # the text filter ran and was checked
    table = str(tmp_path / 'demo' / 'corpus.lance')
    truth = json.loads((tmp_path / 'demo' / 'sources' / 'truth.json').read_text())
    r = subprocess.run([BIN / 'prx_search', '--table', table, '--text', 'web site', '--k', '10', '--json'], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    ids = [json.loads(line)['id'] for line in r.stdout.splitlines()]
    assert len(set(ids) & set(truth['text'])) >= 5, ids                 # the planted text-heavy images, by their tags
    like = subprocess.run([BIN / 'prx_search', '--table', table, '--like', ids[0], '--k', '3'], capture_output=True, text=True)
    assert like.returncode == 0 and ids[0] not in like.stdout.split('\n', 1)[1], like.stdout
    st = subprocess.run([BIN / 'prx_index', '--table', table], capture_output=True, text=True, check=True).stdout
    assert 'caption_tags_fts' in st and 'id_btree' in st
