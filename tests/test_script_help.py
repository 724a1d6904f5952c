"""Every console script's `--help`, run as users run it (the installed script, in its own process): it exits 0, prints
no traceback, describes its options and ends on an example command line that starts with the script's own name. Slow:
each script imports its module (about 3 s each; two at a time)."""
import configparser, re, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
cfg = configparser.ConfigParser(); cfg.read(ROOT / 'settings.ini')
SCRIPTS = sorted(l.split('=')[0].strip() for l in cfg['DEFAULT']['console_scripts'].split('\n') if l.strip())
pytestmark = pytest.mark.slow


@pytest.fixture(scope='module')
def helps():
    missing = [s for s in SCRIPTS if not (BIN / s).exists()]
    assert not missing, f'not installed in {BIN}: {missing} (run ./dev setup after adding a console script)'
    def run(s): return s, subprocess.run([str(BIN / s), '--help'], capture_output=True, text=True, timeout=300, cwd=ROOT)
    with ThreadPoolExecutor(2) as ex: return dict(ex.map(run, SCRIPTS))


def test_every_script_is_listed():
    assert len(SCRIPTS) >= 20 and 'prx_run' in SCRIPTS and 'prx_trainer_yaml' in SCRIPTS


@pytest.mark.parametrize('script', SCRIPTS)
def test_help(helps, script):
    r = helps[script]
    out = r.stdout + r.stderr
    assert r.returncode == 0, f'{script} --help exited {r.returncode}:\n{out[-3000:]}'
    assert 'Traceback' not in out, f'{script} --help printed a traceback:\n{out[-3000:]}'
    assert r.stdout.startswith(f'usage: {script}'), r.stdout[:300]
    m = re.search(r'^example:\n  (\S+)(.*)$', r.stdout, re.M)
    assert m, f'{script} --help has no example line:\n{r.stdout[-1500:]}'
    assert m.group(1) == script and m.group(2).strip(), f'{script} example does not run {script}: {m.group(0)!r}'
    for flag in re.findall(r'(?<=\s)(--[a-z][a-z0-9-]*)', m.group(2)):       # the example uses options the script has
        assert re.search(rf'^\s+{re.escape(flag)}\b', r.stdout, re.M), f'{script} example uses {flag}, which --help does not list'
