"""Render nbs/index.ipynb as README.md (markdown cells as they are, code cells as Python blocks, text outputs as
plain blocks; hidden cells left out; links to notebooks made relative to the repository root). `python tools/readme.py` writes it; `--check` fails if README.md is stale."""
import json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def render(nb_path=ROOT / 'nbs' / 'index.ipynb') -> str:
    nb = json.loads(Path(nb_path).read_text())
    parts = []
    for c in nb['cells']:
        src = ''.join(c['source']).rstrip()
        if not src or src.startswith('#| hide'): continue
        if c['cell_type'] == 'markdown':  # links are relative to nbs/ (the site); the README sits one level up
            parts.append(re.sub(r'\]\((?!https?:|/|#)([^)]+\.ipynb)', r'](nbs/\1', src))
            continue
        parts.append(f'```python\n{src}\n```')
        for o in c.get('outputs', []):
            text = o.get('text') or o.get('data', {}).get('text/plain')
            if text: parts.append('```\n' + ''.join(text).rstrip() + '\n```')
    return '\n\n'.join(parts) + '\n'


if __name__ == '__main__':
    out = render()
    if '--check' in sys.argv:
        if (ROOT / 'README.md').read_text() != out: sys.exit('README.md is out of date: run python tools/readme.py')
    else: (ROOT / 'README.md').write_text(out)
