"""Build the documentation site's preview into _docs/ and check it: `python tools/docs.py [--no-build] [--out DIR]`.

The site proper is built by `nbdev_docs`, which needs Quarto. Quarto is not obtainable from the package registries
(PyPI, Debian, npm), so where it is missing (`./dev docs` decides) this builds a faithful preview with what is
installed: nbdev's own notebook processing (`nbdev.serve.proc_nbs`: front matter, `show_doc` for every exported
name, doc links, hidden and export cells removed, into _proc/), then each processed page rendered to HTML with
nbconvert, in the sidebar order of nbs/_quarto.yml, at the paths Quarto gives them (`output-file`, folders kept).

Then it checks the rendered pages, and exits 1 listing every problem:
- every page of the sidebar exists, was processed and rendered;
- no broken internal link: each relative link (and each link to the site's own address) names a page that exists,
  and its #anchor is an id on that page;
- every image a page references exists (plots are embedded; files such as the browser screenshot are copied);
- every exported public name has its `show_doc` entry on its page (its anchor from prx_nb/_modidx.py exists);
- no page carries a traceback.
"""
import argparse, html, json, os, re, shutil, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NBS = ROOT / 'nbs'


def sidebar(quarto_yml:Path=NBS / '_quarto.yml')->list:
    "[(section, [notebook paths relative to nbs/])] in the order of nbs/_quarto.yml."
    import yaml
    cfg = yaml.safe_load(quarto_yml.read_text())
    out = []
    for sec in cfg['website']['sidebar']['contents']:
        if isinstance(sec, str): out.append(('', [sec]))
        else: out.append((sec.get('section', ''), [c if isinstance(c, str) else c['href'] for c in sec.get('contents', [])]))
    return out


def pandoc_id(text:str)->str:
    "The identifier pandoc (so Quarto) gives a heading: lowercase, punctuation but `_-.` dropped, spaces to hyphens."
    t = re.sub(r'<[^>]+>', '', html.unescape(text)).strip().lower()
    t = re.sub(r'[^\w\s.-]', '', t)
    t = re.sub(r'\s+', '-', t)
    t = re.sub(r'^[^a-z]+', '', t)
    return t or 'section'


def front_matter(nb)->dict:
    "The YAML front matter nbdev puts in a processed notebook's first raw cell."
    import yaml
    for c in nb.cells:
        if c.cell_type == 'raw' and c.source.lstrip().startswith('---'):
            return yaml.safe_load(c.source.strip().strip('-')) or {}
    return {}


def _prepare(nb):
    "Quarto's cell options as nbconvert understands them: echo: false hides the input, include: false the cell."
    keep = []
    for c in nb.cells:
        if c.cell_type == 'raw': continue                                  # front matter
        if c.cell_type == 'markdown':                                      # pandoc link attributes mistune would print
            c.source = re.sub(r'\]\(([^)\s]+)\)\{[^}]*\}', r'](\1)', c.source)
        if c.cell_type == 'code':
            opts = dict(re.findall(r'^#\|\s*([\w-]+):\s*(.+?)\s*$', c.source, re.M))
            if opts.get('include') == 'false': continue
            c.source = '\n'.join(l for l in c.source.splitlines() if not l.startswith('#|')).strip('\n')
            c.metadata.setdefault('tags', [])
            if opts.get('echo') == 'false': c.metadata['tags'].append('remove_input')
            if opts.get('output') == 'false': c.metadata['tags'].append('remove_output')
            if opts.get('code-fold') in ('true', 'show') and opts.get('echo') != 'false':   # Quarto's folded code
                c.metadata['tags'].append('remove_input')
                c.outputs = [dict(output_type='display_data', metadata={}, data={'text/html': _folded(c.source, opts['code-fold'])})] \
                            + list(c.get('outputs', []))
            for o in c.get('outputs', []):
                if 'text/markdown' in o.get('data', {}):
                    md = o['data']['text/markdown']
                    o['data']['text/markdown'] = re.sub(r'\]\(([^)\s]+)\)\{[^}]*\}', r'](\1)', ''.join(md) if isinstance(md, list) else md)
        keep.append(c)
    nb.cells = keep
    return nb


def _folded(source:str, how:str)->str:
    "A cell's code as Quarto folds it: a closed (or, with `code-fold: show`, open) `<details>` headed 'Code'."
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer
    code = highlight(source, PythonLexer(), HtmlFormatter(cssclass='highlight'))
    return f'<details class="code-fold"{" open" if how == "show" else ""}><summary>Code</summary>{code}</details>'


MAX_CODE_LINES = 10


def code_before_results(page:str)->list:
    """[(heading, lines)]: for the top of a rendered page and each heading on it, the lines of code shown before the
    first result under it: a cell's output or a `show_doc` entry. Folded code (`#| code-fold: true`) is not counted."""
    body = page[page.find('<main'):] if '<main' in page else page
    token = re.compile(r'<details class="code-fold".*?</details>'                                    # folded: not shown
                       r'|<h([23])[^>]*>(.*?)</h\1>'                                                  # a heading
                       r'|<div class="input_area">.*?<pre>(.*?)</pre>|<pre class="sourceCode[^"]*"[^>]*>(.*?)</pre>'  # code
                       r'|(output_subarea|class="cell-output)'                                        # a result
                       r'|(text_cell_render|<section)', re.S)                                         # prose
    out, head, lines, done, last = [], '(top of the page)', 0, False, ''
    for m in token.finditer(body):
        if m.group(2) is not None:
            out.append((head, lines))
            head, lines = re.sub(r'<[^>]+>|¶', '', m.group(2)).strip(), 0
            done = last == 'result'           # a heading inside an output is a show_doc entry's: the entry is its result
        elif m.group(3) is not None or m.group(4) is not None:
            if not done: lines += sum(1 for l in re.sub(r'<[^>]+>', '', m.group(3) or m.group(4)).splitlines() if l.strip())
            last = 'code'
        elif m.group(5): done, last = True, 'result'
        else: last = 'text'
    out.append((head, lines))
    return out


def _exporter():
    from nbconvert import HTMLExporter
    from traitlets.config import Config
    c = Config()
    c.TagRemovePreprocessor.enabled = True
    c.TagRemovePreprocessor.remove_input_tags = {'remove_input'}
    c.TagRemovePreprocessor.remove_all_outputs_tags = {'remove_output'}
    c.HTMLExporter.exclude_input_prompt = c.HTMLExporter.exclude_output_prompt = True
    return HTMLExporter(template_name='basic', config=c)


def _ids(body:str)->str:
    "Give every heading its pandoc identifier (unique per page), as Quarto does; the links nbdev writes use them."
    seen = {}
    def sub(m):
        tag, attrs, inner = m.group(1), m.group(2), m.group(3)
        base = pandoc_id(re.sub(r'<a class="anchor-link".*?</a>', '', inner))
        n = seen.get(base, 0); seen[base] = n + 1
        i = base if n == 0 else f'{base}-{n}'
        attrs = re.sub(r'\s*id="[^"]*"', '', attrs)
        inner = re.sub(r'<a class="anchor-link" href="#[^"]*">', f'<a class="anchor-link" href="#{i}">', inner)
        return f'<{tag}{attrs} id="{i}">{inner}</{tag}>'
    return re.sub(r'<(h[1-6])([^>]*)>(.*?)</\1>', sub, body, flags=re.S)


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} – {site}</title><meta name="description" content="{desc}">
<style>{css}</style></head>
<body><nav class="sidebar"><a class="site" href="{up}index.html">{site}</a>{nav}</nav>
<main><h1 class="title">{title}</h1><p class="description">{desc}</p>{body}</main></body></html>
"""
CSS = """body{margin:0;font-family:system-ui,sans-serif;line-height:1.5;color:#222}
.sidebar{position:fixed;top:0;bottom:0;width:16rem;overflow-y:auto;padding:1rem;background:#f6f7f9;font-size:.9rem}
.sidebar .site{font-weight:700;font-size:1.2rem;display:block;margin-bottom:.8rem}
.sidebar h4{margin:1rem 0 .3rem;color:#555}.sidebar a{display:block;text-decoration:none;padding:.1rem 0}
.sidebar a.current{font-weight:700}main{margin-left:18rem;padding:1rem 2rem;max-width:60rem}
.description{color:#555;font-size:1.05rem}pre{background:#f6f7f9;padding:.6rem;overflow-x:auto}
img{max-width:100%}table{border-collapse:collapse;font-size:.85rem}td,th{border:1px solid #ddd;padding:.2rem .5rem}
.jp-OutputArea-output pre{background:none}"""


def build(out:Path=ROOT / '_docs', proc:Path|None=None)->dict:
    "Process the notebooks and render the preview into `out`: {notebook path: page path relative to `out`}."
    from nbdev.config import get_config
    from nbdev.serve import proc_nbs
    from pygments.formatters import HtmlFormatter
    import nbformat
    cfg = get_config()
    proc = Path(proc) if proc else Path(proc_nbs(cfg.nbs_path, n_workers=2))
    pages = {nb: proc / nb for _, nbs in sidebar() for nb in nbs}
    shutil.rmtree(out, ignore_errors=True); out.mkdir(parents=True)
    if (NBS / 'images').exists(): shutil.copytree(NBS / 'images', out / 'images')   # pictures the pages name by path
    shutil.copy(NBS / 'styles.css', out / 'styles.css')
    target, meta = {}, {}
    for nb_path, p in pages.items():
        if not p.exists(): continue
        nb = nbformat.read(p, as_version=4); fm = front_matter(nb)
        name = fm.get('output-file') or Path(nb_path).with_suffix('.html').name
        target[nb_path] = str(Path(nb_path).parent / name) if Path(nb_path).parent != Path('.') else name
        meta[nb_path] = (nb, fm)
    base = f"{cfg.doc_host.rstrip('/')}{cfg.doc_baseurl.rstrip('/')}/"
    ex, css = _exporter(), CSS + '\n' + HtmlFormatter().get_style_defs('.highlight')
    for nb_path, (nb, fm) in meta.items():
        page = target[nb_path]; up = '../' * page.count('/')
        body, _ = ex.from_notebook_node(_prepare(nb))
        if (i := body.find('<body')) >= 0: body = body[body.index('>', i) + 1:body.rfind('</body>')]
        body = _ids(body)
        body = body.replace(f'href="{base}', f'href="{up}')                       # the site's own address -> relative
        def ipynb(m):                                                                # links between notebooks -> pages
            ref, frag = m.group(2), m.group(3) or ''
            src = os.path.normpath(str(Path(nb_path).parent / ref))
            return f'{m.group(1)}="{up}{target[src]}{frag}"' if src in target else m.group(0)
        body = re.sub(r'(href)="(?!https?:)([^"#]+\.ipynb)(#[^"]*)?"', ipynb, body)
        nav = ''.join(f'<h4>{html.escape(s)}</h4>' + ''.join(
            f'<a href="{up}{target[n]}"{" class=current" if n == nb_path else ""}>{html.escape(meta[n][1].get("title", n))}</a>'
            for n in nbs if n in target) for s, nbs in sidebar())
        (out / page).parent.mkdir(parents=True, exist_ok=True)
        (out / page).write_text(PAGE.format(title=html.escape(str(fm.get('title', nb_path))), desc=html.escape(str(fm.get('description', ''))),
                                            site=html.escape(cfg.title), nav=nav, body=body, css=css, up=up))
    return target


def _refs(text:str)->list:
    return re.findall(r'(?:href|src)="([^"]+)"', text)


def exported_names()->dict:
    "{name: 'page.html#anchor'} for every public top-level name prx_nb exports (from prx_nb/_modidx.py)."
    from prx_nb._modidx import d
    out = {}
    for mod, syms in d['syms'].items():
        for sym, (url, _) in syms.items():
            name = sym[len(mod) + 1:]
            if '.' not in name and not name.startswith('_'): out[sym] = url
    return out


def check(out:Path=ROOT / '_docs', # the rendered site
          target:dict|None=None, # what `build` rendered: {notebook: page}; None: not checked
          pages:list|None=None, # the sidebar's notebooks (default: nbs/_quarto.yml's)
          names:dict|None=None, # {exported name: 'page.html#anchor'} (default: `exported_names()`)
         )->list:
    "Problems with the rendered site in `out` (see the module's docstring)."
    problems, ids, texts = [], {}, {}
    pages = [nb for _, nbs in sidebar() for nb in nbs] if pages is None else pages
    names = exported_names() if names is None else names
    for nb in pages:
        if target is None: continue
        if not (NBS / nb).exists(): problems.append(f'nbs/_quarto.yml names {nb}, which does not exist')
        elif nb not in target: problems.append(f"{nb}: not processed (see nbdev's error above)")
    for p in sorted(out.rglob('*.html')):
        rel = p.relative_to(out).as_posix(); texts[rel] = t = p.read_text()
        ids[rel] = set(re.findall(r'\sid="([^"]+)"', t))
    for rel, t in texts.items():
        if 'Traceback (most recent call last)' in t or re.search(r'ansi-red-fg">-{10,}', t):
            problems.append(f'{rel}: a traceback is shown on the page')
        for ref in _refs(t):
            if re.match(r'^(https?:|mailto:|data:|javascript:)', ref): continue
            path, _, frag = ref.partition('#')
            dest = os.path.normpath(str(Path(rel).parent / path)) if path else rel
            if path and not (out / dest).exists():
                problems.append(f'{rel}: links to {ref}, which does not exist'); continue
            if frag and dest.endswith('.html') and frag not in ids.get(dest, set()):
                hint = (f"; private names have no entry on the site: write <code>{frag}</code> instead of `{frag}`"
                        if frag.startswith('_') else '')
                problems.append(f'{rel}: links to {ref}, whose anchor #{frag} is not on that page{hint}')
    for sym, url in names.items():
        page, _, anchor = url.partition('#')
        if page not in ids: problems.append(f'{sym}: its page {page} was not rendered')
        elif anchor not in ids[page]: problems.append(f'{sym}: no show_doc entry on {page} (anchor #{anchor} missing)')
    long = []
    for rel, t in texts.items():
        (_, top), *sections = code_before_results(t)
        if top > MAX_CODE_LINES:
            problems.append(f'{rel}: opens with {top} lines of code before its first result: fold the plumbing '
                            f'(`#| code-fold: true`) or hide it (`#| echo: false`), so the page opens on a result')
        long += [f'{rel} § {h} ({n})' for h, n in sections if n > MAX_CODE_LINES]
    if long: print(f'docs check (not an error): {len(long)} sections open on more than {MAX_CODE_LINES} lines of code, '
                   'an example or plumbing to fold: ' + '; '.join(long))
    print(f'docs check: {len(texts)} pages, {sum(len(_refs(t)) for t in texts.values())} links and images, '
          f'{len(names)} exported names')
    return problems


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', default=str(ROOT / '_docs'), help='where the preview goes (default: _docs/)')
    ap.add_argument('--no-build', action='store_true', help='only check an existing build in --out')
    a = ap.parse_args()
    out = Path(a.out)
    target = None if a.no_build else build(out)
    if target is not None: print(f'preview: {len(target)} pages in {out}/ (open {out}/index.html)')
    found = check(out, target)
    print('\n'.join(found) if found else 'docs check: no problem')
    sys.exit(1 if found else 0)
