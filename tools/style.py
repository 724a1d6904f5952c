"""Measure the package and its notebooks against the idioms in STYLE: `python tools/style.py` prints one figure a
line (`--json` for a dict). tests/test_layout.py asserts the rules that are hard limits."""
import ast, json, re, statistics, sys, tokenize, io
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG, NBS = ROOT / 'prx_nb', ROOT / 'nbs'


def modules():
    "The package's modules as {name: source} (the hand-written `testing` included), `_modidx.py` left out."
    return {p.stem: p.read_text() for p in sorted(PKG.glob('*.py')) if p.stem not in ('_modidx', '__init__')}


def notebooks():
    "The module notebooks (not the analyses) as {stem: notebook dict}."
    return {p.stem: json.loads(p.read_text()) for p in sorted(NBS.glob('[0-9]*.ipynb'))}


def cell_src(c): return ''.join(c['source'])


def is_export(c): return c['cell_type'] == 'code' and re.match(r'#\|\s*export', cell_src(c)) is not None


def longest_export_run(nb):
    "The most export cells in a row with no other code cell (an example or a test) between them."
    best = run = 0
    for c in nb['cells']:
        if c['cell_type'] != 'code': continue
        src = cell_src(c)
        if is_export(c): run += 1
        elif re.match(r'#\|\s*(hide|default_exp)', src): continue
        else: run = 0
        best = max(best, run)
    return best


def _flat(n): return n.elts if isinstance(n, ast.Tuple) else [n]


def patched_assignments(tree):
    "Module-level `Cls.attr = name` statements (a method attached after the class), tuples included."
    return [n.lineno for n in tree.body if isinstance(n, ast.Assign)
            and all(isinstance(v, ast.Name) for v in _flat(n.value))
            and any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) for tt in n.targets for t in _flat(tt))]


def positional_calls(tree, limit=3):
    "Calls that pass more than `limit` arguments by position, as line numbers."
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
            and sum(not isinstance(a, ast.Starred) for a in n.args) > limit]


def joined_statements(src):
    "Lines holding two statements joined by `;`."
    tree = ast.parse(src)
    seen, out = set(), []
    for n in ast.walk(tree):
        if isinstance(n, ast.stmt) and not isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            if n.lineno in seen: out.append(n.lineno)
            seen.add(n.lineno)
    semi = {t.start[0] for t in tokenize.generate_tokens(io.StringIO(src).readline) if t.string == ';'}
    return sorted(set(out) & semi)


def functions(tree):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def shared_comment_lines(src, tree):
    "Signature lines that hold two or more parameters before one trailing comment (docments covers the last only)."
    lines, n = src.splitlines(), 0
    for f in functions(tree):
        body0 = f.body[0].lineno
        for ln in range(f.lineno, body0):
            text = lines[ln - 1]
            if '#' not in text: continue
            code = text.split('#')[0]
            params = [a for a in f.args.args + f.args.kwonlyargs if a.lineno == ln and a.arg not in ('self', 'cls')]
            if len(params) >= 2 and code.strip(): n += 1
    return n


def measure():
    out = dict(patched=0, positional_gt3=0, joined=0, shared_comments=0, ray_init_calls=0)
    doc_lens, fn_lens, long_lines, n_lines = [], [], 0, 0
    for name, src in modules().items():
        tree = ast.parse(src)
        out['patched'] += len(patched_assignments(tree))
        out['positional_gt3'] += len(positional_calls(tree))
        out['joined'] += len(joined_statements(src))
        out['shared_comments'] += shared_comment_lines(src, tree)
        out['ray_init_calls'] += len(re.findall(r'ray\.init\(', src))
        for f in functions(tree):
            fn_lens.append(f.end_lineno - f.lineno + 1)
            d = ast.get_docstring(f)
            if d: doc_lens.append(len(d))
        for c in ast.walk(tree):
            if isinstance(c, ast.ClassDef) and ast.get_docstring(c): doc_lens.append(len(ast.get_docstring(c)))
        lines = [l for l in src.splitlines() if not l.startswith('#')]
        n_lines += len(lines)
        long_lines += sum(len(l) > 110 for l in lines)
    q = statistics.quantiles
    out.update(
        doc_median=statistics.median(doc_lens), doc_over_120=round(100 * sum(d > 120 for d in doc_lens) / len(doc_lens), 1),
        fn_median=statistics.median(fn_lens), fn_p90=q(fn_lens, n=10)[-1], fn_max=max(fn_lens),
        lines_over_110_pct=round(100 * long_lines / n_lines, 1),
        longest_export_run=max(longest_export_run(nb) for nb in notebooks().values()))
    return out


def offenders(name):
    "What one module (and its notebook) still does against the idioms, one line each."
    src = modules()[name]
    tree, lines, out = ast.parse(src), src.splitlines(), []
    out += [f'{name}.py:{n}: {len(lines[n - 1])} chars' for n in range(1, len(lines) + 1)
            if len(lines[n - 1]) > 110 and not lines[n - 1].startswith('#')]
    out += [f'{name}.py:{n}: statements joined by ;' for n in joined_statements(src)]
    out += [f'{name}.py:{n}: Cls.attr = function' for n in patched_assignments(tree)]
    out += [f'{name}.py:{n}: call with more than 3 positional arguments' for n in positional_calls(tree)]
    for f in functions(tree) + [c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)]:
        d = ast.get_docstring(f)
        if d and (len(d) > 100 or '\n' in d): out.append(f'{name}.py:{f.lineno}: {f.name} docstring {len(d)} chars')
    out += [f'{name}.py: {shared_comment_lines(src, tree)} signature lines hold several parameters before one comment']
    nb = next((nb for k, nb in notebooks().items() if any(re.match(r'#\|\s*default_exp\s+' + name + r'\b', cell_src(c))
                                                          for c in nb['cells'])), None)
    if nb: out.append(f'notebook: longest run of export cells with no example {longest_export_run(nb)}')
    return out


if __name__ == '__main__':
    if '--module' in sys.argv:
        print('\n'.join(offenders(sys.argv[sys.argv.index('--module') + 1])))
        sys.exit()
    m = measure()
    print(json.dumps(m) if '--json' in sys.argv else '\n'.join(f'{k:22} {v}' for k, v in m.items()))
