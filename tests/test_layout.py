"""The floor plan, checked from the notebooks and the exported package: notebooks import only lower-numbered
modules, no private name crosses a module boundary, methods are added with `@patch`, and exported calls keep
their tails keyword-only."""
import ast, json, re, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'tools'))
import style  # noqa: E402


def module_notebooks():
    "{module name: (order key, notebook path)} from each numbered notebook's `default_exp`."
    out = {}
    for p in sorted((ROOT / 'nbs').glob('[0-9]*.ipynb')):
        nb = json.loads(p.read_text())
        exp = next(m.group(1) for c in nb['cells'] if (m := re.match(r'#\|\s*default_exp\s+(\S+)', style.cell_src(c))))
        out[exp] = (p.stem.split('_', 1)[0], p)
    return out


def imported_modules(src):
    "prx_nb modules and the names taken from them in a cell or a file, as (module, [names])."
    out = []
    for n in ast.walk(ast.parse(src)):
        if isinstance(n, ast.ImportFrom) and n.module and (n.module.startswith('prx_nb.') or n.level == 1):
            mod = n.module.split('.')[-1] if n.level == 0 else n.module
            out.append((mod, [a.name for a in n.names]))
        elif isinstance(n, ast.Import):
            out += [(a.name.split('.')[1], []) for a in n.names if a.name.startswith('prx_nb.')]
    return out


def cell_code(c):
    "A code cell's source with notebook magics and shell lines left out, so it parses."
    return '\n'.join(l for l in style.cell_src(c).splitlines() if not l.lstrip().startswith(('%', '!')))


NBS = module_notebooks()


def test_the_notebooks_are_the_modules():
    "Each module is exported from a notebook, but `testing` (the tests' fixtures), written by hand."
    exported = {p.stem for p in (ROOT / 'prx_nb').glob('*.py')} - {'__init__', '_modidx', 'testing'}
    assert set(NBS) == exported


@pytest.mark.parametrize('mod', sorted(NBS))
def test_notebook_imports_only_lower_numbers(mod):
    order, path = NBS[mod]
    nb = json.loads(path.read_text())
    bad = [(used, NBS[used][0]) for c in nb['cells'] if c['cell_type'] == 'code'
           for used, _ in imported_modules(cell_code(c)) if used in NBS and used != mod and NBS[used][0] >= order]
    assert not bad, f'{path.name} imports from higher-numbered notebooks: {bad}'


def test_no_private_name_crosses_a_module():
    bad = []
    for p in sorted((ROOT / 'prx_nb').glob('*.py')):
        if p.stem == '_modidx': continue
        bad += [(p.name, m, n) for m, names in imported_modules(p.read_text()) for n in names if n.startswith('_')]
    for mod, (_, path) in NBS.items():
        for c in json.loads(path.read_text())['cells']:
            if c['cell_type'] != 'code': continue
            bad += [(path.name, m, n) for m, names in imported_modules(cell_code(c)) for n in names
                    if n.startswith('_') and m != mod]
    assert not bad, f'private names imported across modules: {bad}'


def test_methods_are_patched_not_assigned():
    bad = {name: style.patched_assignments(ast.parse(src)) for name, src in style.modules().items()}
    assert not {k: v for k, v in bad.items() if v}, bad


def test_exported_calls_pass_at_most_three_positional_arguments():
    bad = {name: style.positional_calls(ast.parse(src)) for name, src in style.modules().items()}
    assert not {k: v for k, v in bad.items() if v}, f'module: lines of calls with more than 3 positional args: {bad}'


def test_the_checks_can_fail():
    "The checks above see what they look for."
    tree = ast.parse('class A: pass\ndef _f(self): pass\nA.f = _f\nA.g, A.h = _f, _f\nprint(1, 2, 3, 4)\n')
    assert style.patched_assignments(tree) == [3, 4]
    assert style.positional_calls(tree) == [5]
    assert imported_modules('from prx_nb.mds import _x, y\nfrom .table import z\nimport prx_nb.core') == [
        ('mds', ['_x', 'y']), ('table', ['z']), ('core', [])]


def test_the_sidebar_lists_every_page_in_order():
    import yaml
    cfg = yaml.safe_load((ROOT / 'nbs' / '_quarto.yml').read_text())
    pages = [p for s in cfg['website']['sidebar']['contents'] for p in s['contents']]
    on_disk = {str(p.relative_to(ROOT / 'nbs')) for p in (ROOT / 'nbs').rglob('*.ipynb') if '.ipynb_checkpoints' not in p.parts}
    assert sorted(pages) == sorted(on_disk) and len(pages) == len(set(pages))
    numbered = [p for p in pages if p[0].isdigit()]
    assert numbered == sorted(numbered), numbered


def test_links_to_notebooks_resolve():
    "Every relative link to a notebook, in the notebooks' markdown and in the README, names a file that exists."
    link = re.compile(r'\]\(([^)#\s]+\.ipynb)')
    bad = []
    for p in sorted((ROOT / 'nbs').rglob('*.ipynb')):
        for c in json.loads(p.read_text())['cells']:
            if c['cell_type'] == 'markdown':
                bad += [(p.name, l) for l in link.findall(style.cell_src(c)) if not (p.parent / l).exists()]
    bad += [('README.md', l) for l in link.findall((ROOT / 'README.md').read_text()) if not (ROOT / l).exists()]
    assert not bad, bad


def test_console_scripts_name_functions_that_exist():
    "Every entry point in settings.ini names a function of the module it points at (a moved script is caught here)."
    import configparser, importlib
    cfg = configparser.ConfigParser(delimiters=['='])
    cfg.read(ROOT / 'settings.ini')
    entries = cfg['DEFAULT']['console_scripts'].split()
    assert len(entries) >= 16
    for e in entries:
        name, target = e.split('=')
        mod, fn = target.split(':')
        assert callable(getattr(importlib.import_module(mod), fn, None)), f'{name}: {target} does not exist'
