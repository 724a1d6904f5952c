"""Execute notebooks in place so they are committed with their outputs: `python tools/run_nbs.py [NB ...]` (default:
every notebook under nbs/). Every cell runs, `#| slow` ones included, except `#| gpu` and `#| eval: false` cells and
the export cell, which keep what they hold. Progress bars keep their last state. Stops at the first error, naming the
notebook and cell. `./dev nbs` runs it over every notebook with `PRX_FULL=1` (the analyses' full runs), then
`nbdev_clean` and the output check (`tools/check_nbs.py`)."""
import os, re, sys, time
from pathlib import Path
from execnb.nbio import read_nb, write_nb
from execnb.shell import CaptureShell

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault('RAY_AUTH_MODE', 'disabled')  # a local Ray for the examples: no token files, no warning


def _skip(cell)->bool:
    "Cells left as they are: markdown, the export call, GPU cells and cells that must never run."
    if cell.cell_type != 'code': return True
    src = cell.source
    if 'nbdev_export(' in src: return True
    head = [l for l in src.splitlines() if l.startswith('#|')]
    return any(re.match(r'#\|\s*(gpu\b|eval:\s*false)', l) for l in head)


def tidy(nb):
    "Progress bars redraw a line with carriage returns; keep each line's last state, as a terminal shows it."
    for c in nb.cells:
        for o in c.get('outputs', []):
            if o.get('output_type') != 'stream': continue
            text = ''.join(o['text']) if isinstance(o['text'], list) else o['text']
            o['text'] = '\n'.join(l.rstrip('\r').rsplit('\r', 1)[-1] for l in text.split('\n'))
    return nb


def run(path:Path)->float:
    "Execute the notebook at `path` in its folder and write it back with its outputs; returns seconds."
    t0, nb, cwd = time.time(), read_nb(path), os.getcwd()
    for c in nb.cells:  # a cell that prints nothing now must not keep what it printed before
        if not _skip(c): c.outputs, c.execution_count = [], None
    shell = CaptureShell(path)
    try:
        os.chdir(path.parent)
        shell.run_all(nb, exc_stop=True, preproc=_skip)
    except Exception:
        sys.stderr.write(shell.prettytb(fname=path) + '\n')
        raise SystemExit(f'{path}: a cell failed (above); nothing was written')
    finally: os.chdir(cwd)
    write_nb(tidy(nb), path)
    return time.time() - t0


if __name__ == '__main__':
    if '--tidy' in sys.argv:                 # only tidy the stored outputs of the notebooks named
        for p in sys.argv[2:]: write_nb(tidy(read_nb(p)), p)
        raise SystemExit
    paths = [Path(p).resolve() for p in sys.argv[1:]] or sorted((ROOT / 'nbs').rglob('*.ipynb'))
    paths = [p for p in paths if '.ipynb_checkpoints' not in p.parts]
    if len(paths) == 1: print(f'{paths[0].relative_to(ROOT)}: {run(paths[0]):.0f} s', flush=True)
    else:  # each notebook in a fresh process, as a reader runs it: nothing (open files, shared memory) carries over
        import subprocess
        for p in paths:
            if subprocess.run([sys.executable, __file__, str(p)]).returncode: raise SystemExit(1)
