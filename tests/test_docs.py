"""The checks that keep the notebooks' outputs and the docs site honest (tools/check_nbs.py, tools/docs.py), each
shown to catch what it is for; and the workflow files. The real site is built and checked by `./dev docs`."""
import json, sys
from pathlib import Path
import pytest, yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'tools'))
import check_nbs, docs, run_nbs


def nb(tmp_path, *cells):
    "A notebook of code cells: each (source, outputs)."
    p = tmp_path / 'x.ipynb'
    p.write_text(json.dumps(dict(nbformat=4, nbformat_minor=5, metadata={}, cells=[
        dict(cell_type='code', source=s, outputs=o, metadata={}, execution_count=None) for s, o in cells])))
    return p


def result(text): return dict(output_type='execute_result', data={'text/plain': text}, metadata={}, execution_count=1)
def stream(text): return dict(output_type='stream', name='stdout', text=text)


@pytest.mark.parametrize('src, shows', [
    ('x = 1\nx', True), ('df.head()', True), ('test_eq(1, 1)', False), ('x = 1', False), ('import os', False),
    ('fig, ax = plt.subplots()\nax.plot([1])', True), ('plot_resolution(df)', True), ('print(1)', False),
    ('#| export\ndef f():\n    fig, ax = plt.subplots()\n    return fig', False), ('p.unlink()', False), ('x;', False),
    ("#| export\nneeds_extra('prx_nb.x', 'build')", False)])
def test_shows(src, shows):
    assert check_nbs.shows(src) is shows


def test_check_nbs_finds_each_problem(tmp_path):
    p = nb(tmp_path, ('x = 1\nx', []),                                              # shows, no output
           ('y = 2\ny', [result('2')]),                                             # fine
           ('1 / 0', [dict(output_type='error', ename='ZeroDivisionError', evalue='', traceback=[])]),
           ('print(p)', [stream('/work/main/nbs/x.png\n')]),                        # a machine path
           ('run()', [stream('0%|  | 0/3\r100%|##| 3/3\n')]),                        # progress-bar redraws
           ('#| eval: false\nz', []))                                               # never executed: not checked
    found = check_nbs.problems(p)
    assert len(found) == 4, found
    assert 'code cell 1' in found[0] and 'no stored output' in found[0]
    assert 'traceback' in found[1] and 'machine path' in found[2] and 'progress-bar' in found[3]
    assert check_nbs.problems(nb(tmp_path, ('y = 2\ny', [result('2')]))) == []


def test_tidy_keeps_each_lines_last_state(tmp_path):
    p = nb(tmp_path, ('run()', [stream('start\n\rFID:   0%|  | 0/2\rFID: 100%|##| 2/2\nend\n')]))
    from execnb.nbio import read_nb
    n = run_nbs.tidy(read_nb(p))
    assert n.cells[0].outputs[0]['text'] == 'start\nFID: 100%|##| 2/2\nend\n'


def page(path:Path, body:str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'<html><body>{body}</body></html>')


def test_docs_check_finds_each_problem(tmp_path):
    page(tmp_path / 'a.html', '<h2 id="f">f</h2><a href="b.html#g">g</a><a href="b.html#nope">x</a><a href="c.html">c</a>'
                              '<img src="images/shot.png"><a href="https://example.org/x.html#y">out</a>')
    page(tmp_path / 'analysis' / 'b.html', '')
    page(tmp_path / 'b.html', '<h3 id="g">g</h3><pre>Traceback (most recent call last):</pre><a href="a.html#_priv">p</a>')
    found = docs.check(tmp_path, pages=[], names={'prx_nb.a.f': 'a.html#f', 'prx_nb.b.h': 'b.html#h', 'prx_nb.z.k': 'z.html#k'})
    text = '\n'.join(found)
    assert 'a.html: links to b.html#nope, whose anchor #nope is not on that page' in text
    assert 'a.html: links to c.html, which does not exist' in text
    assert 'a.html: links to images/shot.png, which does not exist' in text
    assert 'b.html: a traceback is shown on the page' in text
    assert 'write <code>_priv</code>' in text
    assert 'prx_nb.b.h: no show_doc entry on b.html' in text and 'prx_nb.z.k: its page z.html was not rendered' in text
    assert len(found) == 7, found
    (tmp_path / 'images').mkdir(); (tmp_path / 'images' / 'shot.png').write_bytes(b'png')
    assert len(docs.check(tmp_path, pages=[], names={})) == 4                 # the image exists now; names not asked


def test_pandoc_ids():
    assert docs.pandoc_id('Bucketed.ok') == 'bucketed.ok'
    assert docs.pandoc_id('plan_buckets') == 'plan_buckets'
    assert docs.pandoc_id('1. The site') == 'the-site'                          # up to the first letter dropped
    assert docs.pandoc_id('Side by side, with <em>the post</em>!') == 'side-by-side-with-the-post'


def test_sidebar_names_every_notebook():
    listed = {nb for _, nbs in docs.sidebar() for nb in nbs}
    have = {p.relative_to(ROOT / 'nbs').as_posix() for p in (ROOT / 'nbs').rglob('*.ipynb') if '.ipynb_checkpoints' not in p.parts}
    assert listed == have, (listed ^ have)


def test_workflows():
    test = yaml.safe_load((ROOT / '.github/workflows/test.yaml').read_text())
    assert any('./dev test' in str(s.get('run', '')) for s in test['jobs']['test']['steps'])
    deploy = yaml.safe_load((ROOT / '.github/workflows/deploy.yaml').read_text())
    assert deploy['jobs']['deploy']['steps'] == [{'uses': 'fastai/workflows/quarto-ghp@master'}]
    assert deploy['permissions']['pages'] == 'write'


def test_code_before_results_counts_what_a_reader_meets_first():
    code = lambda n: '<div class="input_area"><div class="highlight"><pre>' + '\n'.join(f'x{i} = {i}' for i in range(n)) + '</pre></div></div>'
    out = '<div class="output_subarea"><pre>42</pre></div>'
    page = lambda *parts: '<main>' + ''.join(parts) + '</main>'
    assert docs.code_before_results(page(code(12), out))[0] == ('(top of the page)', 12)
    folded = docs._folded('\n'.join(f'x{i} = {i}' for i in range(12)), 'true')
    assert docs.code_before_results(page(folded, out, code(3)))[0][1] == 0           # folded plumbing is not counted
    heads = docs.code_before_results(page('<h2 id="a">A</h2>', code(11), out, code(30)))
    assert heads == [('(top of the page)', 0), ('A', 11)]                              # code after a result is not counted
    assert folded.startswith('<details class="code-fold"><summary>Code</summary>') and 'x11' in folded
