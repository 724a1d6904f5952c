"""Check that the committed notebooks carry their results, cleanly: `python tools/check_nbs.py [NB ...]` (default:
every notebook under nbs/). Exits 1 and lists each problem (notebook, cell number, what to do) when

- a code cell that shows something has no stored output: it ends in an expression (not an assignment, an
  `import`, or a call of a test helper such as `test_eq` that returns nothing) or it draws a plot;
- a stored output holds a traceback (an error output, or a stream that printed one);
- an output names a path of the machine that ran it (`/work/`, `/root/`, `/home/`, `/tmp/`, `/private/var/`);
- a stream output holds progress-bar noise (carriage-return redraws);
- an output holds widget state with no static fallback (it renders as a blank box on the site);
- an image output is larger than 400 kB (downscale it) or the notebook is larger than 3 MB.

`#| eval: false`, `#| gpu` and the `nbdev_export` cell are not executed by `./dev nbs` and are not checked for
output. Run `./dev nbs` to re-execute and save every notebook."""
import ast, base64, json, re, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUIET_CALLS = re.compile(r'^(test_\w*|assert\w*|needs_extra|release_shared_memory_with_datasets|show_doc_none|print|display|plt\.close|np\.testing\.\w+|warnings\.\w+|'
                         r'time\.sleep|os\.\w+|shutil\.\w+|([\w.]+\.)?(unlink|mkdir|write_text|write_bytes|close|clear|join|'
                         r'start|stop|shutdown|update|append|extend|add|remove|sort|touch|rmtree|rmdir|set_\w+|seed))$')
PLOTS = re.compile(r'^(plt\.(show|plot|imshow|subplots|figure|bar|barh|hist|scatter)|\w+\.plot|show_images|show_grid|plot_\w+)$')
MACHINE_PATHS = re.compile(r'(/work/|/root/|/home/[a-z]|/tmp/|/private/var/)')
MAX_IMAGE, MAX_NB = 400_000, 3_000_000


def _skipped(src:str)->bool:
    if 'nbdev_export(' in src: return True
    return any(re.match(r'#\|\s*(gpu\b|eval:\s*false)', l) for l in src.splitlines() if l.startswith('#|'))


def _code(src:str)->str:
    "The cell as Python: directives, magics and shell escapes dropped."
    return '\n'.join('' if re.match(r'\s*(%|!)', l) else l for l in src.splitlines())


def _call_name(node)->str:
    f = node.func
    parts = []
    while isinstance(f, ast.Attribute): parts.append(f.attr); f = f.value
    if isinstance(f, ast.Name): parts.append(f.id)
    return '.'.join(reversed(parts))


def _draws(tree)->bool:
    "Is a plot drawn by the cell's own top-level code (not inside a function or class it defines)?"
    for st in tree.body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): continue
        if any(isinstance(n, ast.Call) and PLOTS.match(_call_name(n)) for n in ast.walk(st)): return True
    return False


def shows(src:str)->bool:
    "Does this cell, run, show something a reader expects to see?"
    try: tree = ast.parse(_code(src))
    except SyntaxError: return False
    if _draws(tree): return True
    if not tree.body or not isinstance(last := tree.body[-1], ast.Expr): return False
    v = last.value
    if isinstance(v, ast.Constant) and v.value is None: return False
    if isinstance(v, (ast.Await,)): return False
    if src.rstrip().endswith(';'): return False
    if isinstance(v, ast.Call) and QUIET_CALLS.match(_call_name(v)): return False
    return True


def _text(o)->str:
    if 'text' in o: return ''.join(o['text'])
    d = o.get('data', {})
    return ''.join(''.join(d[k]) for k in ('text/plain', 'text/html', 'text/markdown') if k in d)


def problems(path:Path)->list:
    nb, out = json.loads(path.read_text()), []
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    if path.stat().st_size > MAX_NB: out.append(f'{name}: {path.stat().st_size/1e6:.1f} MB; keep notebooks under {MAX_NB/1e6:.0f} MB (downscale images)')
    n = 0
    for c in nb['cells']:
        if c['cell_type'] != 'code': continue
        n += 1
        src, outs = ''.join(c['source']), c.get('outputs', [])
        where = f'{name}, code cell {n} ({src.strip().splitlines()[0][:50] if src.strip() else "empty"!r})'
        if _skipped(src): continue
        if not outs and shows(src): out.append(f'{where}: shows something but has no stored output; run ./dev nbs')
        for o in outs:
            t = _text(o)
            if o.get('output_type') == 'error' or 'Traceback (most recent call last)' in t:
                out.append(f'{where}: stored output holds a traceback'); continue
            if m := MACHINE_PATHS.search(t): out.append(f'{where}: output names a machine path ({m.group(1)}...); print paths relative to the notebook')
            if o.get('output_type') == 'stream' and '\r' in t.rstrip('\n').replace('\r\n', '\n'):
                out.append(f'{where}: progress-bar noise in a stream output; run it quietly or without a bar')
            d = o.get('data', {})
            if 'application/vnd.jupyter.widget-view+json' in d and not ({'image/png', 'text/html'} & set(d)):
                out.append(f'{where}: widget output with no static fallback renders blank on the site; show a screenshot')
            for k in ('image/png', 'image/jpeg'):
                if k in d and (sz := len(base64.b64decode(''.join(d[k])))) > MAX_IMAGE:
                    out.append(f'{where}: {k} output of {sz/1e3:.0f} kB; downscale it (limit {MAX_IMAGE/1e3:.0f} kB)')
    return out


if __name__ == '__main__':
    paths = [Path(p).resolve() for p in sys.argv[1:]] or sorted(p for p in (ROOT / 'nbs').rglob('*.ipynb') if '.ipynb_checkpoints' not in p.parts)
    found = [x for p in paths for x in problems(p)]
    print('\n'.join(found) if found else f'notebook outputs: {len(paths)} notebooks checked, no problem')
    sys.exit(1 if found else 0)
