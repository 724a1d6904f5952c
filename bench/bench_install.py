"""What each install of prx_nb puts on a machine, against the one install for every machine that came before it
(`all`: every extra a build machine has): `python bench/bench_install.py [INSTALL ...]`.

Each install (`core`, `build`, `ray`, `models`, `notebook`, `all`, `vllm`) goes into a fresh venv from a wheel of this
checkout, the way a user installs it (`pip install 'prx_nb[build]'`), and the venv's size on disk and its number of
distributions are recorded; an extra's own cost is its install less the core's. `vllm` is installed as
`prx_nb[build,vllm]`, the captioning node's environment (vLLM pins its own torch and transformers, so it is not in
`all`). `streaming` is `mosaicml-streaming` alone, the floor for a training node that streams MDS with the stock
loader (it brings torch, torchvision and transformers itself). The ratio printed is the core's size over `all`'s: what a training node saves. Results go to
bench/results/install.json (merged with earlier runs of other installs) and print as a table.

    python bench/bench_install.py              # every install: about 15 minutes on 2 cores, 30 GB of disk while it runs
    python bench/bench_install.py core build   # some of them
"""
import json, shutil, subprocess, sys, tempfile, time
from pathlib import Path
from common import RESULTS, parser, record

ROOT = Path(__file__).resolve().parent.parent
OUT = RESULTS / 'install.json'
INSTALLS = {'core': '{wheel}', 'build': '{wheel}[build]', 'ray': '{wheel}[ray]', 'models': '{wheel}[models]',
            'notebook': '{wheel}[notebook]', 'all': '{wheel}[all]', 'vllm': '{wheel}[build,vllm]',
            'streaming': 'mosaicml-streaming'}   # the peer: a training node that streams MDS with the stock loader alone
NAMES = {k: v.replace('{wheel}', 'prx_nb') for k, v in INSTALLS.items()}


def du(path:Path)->int:
    "Bytes on disk under `path` (hard links once), as `du` counts them."
    return int(subprocess.run(['du', '-sb', str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def measure(name:str, wheel:Path, python:str)->dict:
    with tempfile.TemporaryDirectory(prefix=f'prx-size-{name}-') as d:
        venv = Path(d) / 'venv'
        subprocess.run([python, '-m', 'venv', str(venv)], check=True)
        empty = du(venv)
        t = time.time()
        r = subprocess.run([str(venv / 'bin' / 'pip'), 'install', '-q', '--no-compile', INSTALLS[name].format(wheel=wheel)],
                           capture_output=True, text=True)
        if r.returncode: return dict(install=NAMES[name], error=r.stderr.strip().splitlines()[-12:])
        listed = subprocess.run([str(venv / 'bin' / 'pip'), 'list', '--format=json'], capture_output=True, text=True, check=True)
        dists = sorted(p['name'].lower() for p in json.loads(listed.stdout))
        biggest = subprocess.run(f'du -sb {venv}/lib/python*/site-packages/* | sort -rn | head -8', shell=True,
                                 capture_output=True, text=True).stdout.split('\n')
        return dict(install=NAMES[name], bytes=du(venv) - empty, distributions=len(dists) - 2,  # less pip, setuptools
                    seconds=round(time.time() - t, 1), dists=dists,
                    largest={Path(l.split('\t')[1]).name: int(l.split('\t')[0]) for l in biggest if '\t' in l})


def table(results:dict)->str:
    core = results.get('core', {}).get('bytes')
    rows = ['| install | size on disk | over the core | distributions |', '| --- | --- | --- | --- |']
    for name in INSTALLS:
        r = results.get(name)
        if not r: continue
        if 'error' in r: rows.append(f"| `{r['install']}` | did not install: {r['error'][-1]} | | |"); continue
        over = "" if name == "core" or core is None else f"{(r['bytes'] - core) / 1e9:+.2f} GB"
        rows.append(f"| `{r['install']}` | {r['bytes'] / 1e9:.2f} GB | {over} | {r['distributions']} |")
    return '\n'.join(rows)


def main():
    ap = parser(__doc__)
    ap.add_argument('installs', nargs='*', default=list(INSTALLS), help=f'which installs (default: all of {list(INSTALLS)})')
    ap.add_argument('--python', default=shutil.which('python3.11') or sys.executable, help='the Python the venvs are made with')
    a = ap.parse_args()
    bad = [n for n in a.installs if n not in INSTALLS]
    if bad: ap.error(f'unknown install {bad}: choose from {list(INSTALLS)}')
    results = json.loads(OUT.read_text())['installs'] if OUT.exists() else {}
    with tempfile.TemporaryDirectory() as w:
        subprocess.run([sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps', '-w', w, str(ROOT)], check=True,
                       capture_output=True)
        wheel = next(Path(w).glob('prx_nb-*.whl'))
        for name in a.installs:
            print(f'== {name}: pip install {NAMES[name]}', flush=True)
            results[name] = measure(name, wheel, a.python)
    core, every = (results.get(k, {}).get('bytes') for k in ('core', 'all'))
    peer = results.get('streaming', {}).get('bytes')
    record('install', installs=results, core_over_all=core / every if core and every else None,
           core_over_streaming=core / peer if core and peer else None)
    print(table(results))
    if core and every: print(f'the core install is {core / every:.0%} of the install for every machine ({core / 1e9:.2f} GB '
                             f'against {every / 1e9:.2f} GB)')
    if core and peer: print(f'the core install is {core / peer:.2f}x mosaicml-streaming alone ({peer / 1e9:.2f} GB), '
                            'the floor for a node that streams MDS')


if __name__ == '__main__': main()
