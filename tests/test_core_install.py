"""The core install is what a training node needs. `pip install prx_nb` (no extras) goes into a clean venv, and there the
README's training loop reads the demo tree (written here, by the full install) with its skip lists and opt-outs
applied, and trains a small model on it; Lance, Ray, DuckDB and OpenCV are absent, and importing a module of an extra
says which extra to install.

Slow the first time on a machine (about 2 minutes: the venv gets torch, which mosaicml-streaming requires). The venv's
dependencies are kept under ~/.cache/prx_nb/, keyed by the core requirements, so later runs reuse them and only
prx_nb itself, from a wheel of this checkout, is installed again."""
import configparser, hashlib, json, os, shlex, shutil, subprocess, sys, textwrap
from pathlib import Path
import pytest
from prx_nb.skips import skip_ids, optout

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
ABSENT = ['lance', 'ray', 'duckdb', 'cv2', 'lance_ray', 'ipywidgets', 'jupyterlab']


def core_requirements()->list:
    cfg = configparser.ConfigParser(delimiters=['=']); cfg.read(ROOT / 'settings.ini')
    return shlex.split(cfg['DEFAULT']['requirements'])


@pytest.fixture(scope='module')
def core_env(tmp_path_factory):
    "A venv with `pip install prx_nb` from a wheel of this checkout, and nothing else."
    reqs = core_requirements()
    key = hashlib.sha1(' '.join(reqs + [sys.version]).encode()).hexdigest()[:12]
    venv = Path(os.environ.get('XDG_CACHE_HOME', Path.home() / '.cache')) / 'prx_nb' / f'core-env-{key}'
    pip = [str(venv / 'bin' / 'python'), '-m', 'pip', 'install', '-q', '--no-compile']
    if not (venv / '.complete').exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, '-m', 'venv', str(venv)], check=True)
        subprocess.run(pip + reqs, check=True)
        (venv / '.complete').touch()
    w = tmp_path_factory.mktemp('wheel')
    subprocess.run([sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps', '-w', str(w), str(ROOT)], check=True,
                   capture_output=True)
    wheel = next(w.glob('prx_nb-*.whl'))
    # the wheel's own dependencies must already be there: pip would install what the core lacks, and fail offline
    subprocess.run(pip + ['--force-reinstall', '--no-deps', str(wheel)], check=True)
    check = subprocess.run(pip + ['--dry-run', '--report', '-', str(wheel)], capture_output=True, text=True, check=True)
    todo = [i['metadata']['name'] for i in json.loads(check.stdout)['install'] if i['metadata']['name'] != 'prx_nb']
    assert todo == [], f'the core install needs {todo}, which the cached venv lacks'
    return venv / 'bin' / 'python'


@pytest.fixture(scope='module')
def demo_tree(make_demo_tree):
    "The demo tree, written by the full install, with a dedup skip list and one opt-out; (root, ids it may serve)."
    root, man = make_demo_tree('core')
    ids = [i for b in man.values() for i in b]
    skip_ids(root, 'dedup', set(ids[::5]))
    gone = ids[1]
    optout(root, [gone])
    return root, set(ids) - set(ids[::5]) - {gone}


def run(python, code:str, cwd:Path)->subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
    return subprocess.run([str(python), '-c', textwrap.dedent(code)], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=600)


def test_core_install_has_no_build_stack(core_env, tmp_path):
    r = run(core_env, f"""
        import importlib.util, json
        print(json.dumps({{n: importlib.util.find_spec(n) is not None for n in {ABSENT!r}}}))""", tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {n: False for n in ABSENT}


def test_core_install_trains_from_the_demo_tree(core_env, demo_tree, tmp_path):
    root, may_serve = demo_tree
    r = run(core_env, f"""
        import json, sys, torch
        from streaming import StreamingDataLoader
        from prx_nb.loader import tree_dataset, decode_sample, collate

        ds = tree_dataset({str(root)!r}, batch_size=4, transform=decode_sample)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(8), torch.nn.Flatten(), torch.nn.Linear(3 * 64, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        seen, losses = [], []
        for epoch in range(2):
            for batch in StreamingDataLoader(ds, batch_size=4, num_workers=0, collate_fn=collate):
                x = batch['image'].float() / 255
                target = x.mean(dim=(2, 3))          # learn each image's mean colour from its pooled pixels
                loss = torch.nn.functional.mse_loss(model(x), target)
                opt.zero_grad(); loss.backward(); opt.step()
                seen += batch['id']; losses.append(loss.item())
        print(json.dumps(dict(seen=seen, losses=losses, mods=sorted(m for m in sys.modules if m.split('.')[0] in
                                                                   {ABSENT!r}))))""", tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out['mods'] == []
    assert set(out['seen']) <= may_serve, 'served a skipped or opted-out sample'
    assert len(set(out['seen'])) > len(may_serve) // 2
    first, last = sum(out['losses'][:5]) / 5, sum(out['losses'][-5:]) / 5
    assert last < first, f'the loss did not fall: {first:.4f} -> {last:.4f}'


@pytest.mark.parametrize('module,extra', [('prx_nb.ingest', 'build'), ('prx_nb.pipeline', 'build'),
                                          ('prx_nb.profile', 'build'), ('prx_nb.metrics', 'models')])
def test_a_module_of_an_extra_names_it(core_env, tmp_path, module, extra):
    r = run(core_env, f'import {module}', tmp_path)
    assert r.returncode == 1
    assert f"pip install 'prx_nb[{extra}]'" in r.stderr.strip().splitlines()[-1], r.stderr[-1500:]


def test_a_lazy_import_names_its_extra(core_env, demo_tree, tmp_path):
    "The loader's modules import everything they need; a table call reaches for Lance and says how to get it."
    r = run(core_env, """
        from prx_nb.table import open_table
        open_table('t.lance')""", tmp_path)
    assert "No module named 'lance' (prx_nb's build extra installs it: pip install 'prx_nb[build]')" in r.stderr, r.stderr[-1500:]
