"README.md is nbs/index.ipynb rendered: the docs home and the README say the same."
import subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_matches_index():
    r = subprocess.run([sys.executable, str(ROOT / 'tools' / 'readme.py'), '--check'], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_ci_runs_the_readme_test_command():
    assert './dev test' in (ROOT / 'README.md').read_text()
    assert 'exec ./dev test' in (ROOT / '.ci' / 'run').read_text()
