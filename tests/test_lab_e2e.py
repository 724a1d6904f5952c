"""`./dev lab` end to end: the command itself starts JupyterLab (its root moved to a folder of the test's) and Debian's
headless Chromium driven by Playwright uses it as a person would.

- `test_lab_run_type_and_click`: a small notebook showing `Browser` over the demo corpus; all its cells run from the
  Run menu, a query is typed and "similar" clicked under a thumbnail, and the test checks what the page shows.
- `test_lab_runs_05_explore`: the real nbs/05_explore.ipynb (in a copy of nbs/) runs from the Run menu, every cell of
  it, as CI runs it under nbdev_test; then a cell appended at its end shows the notebook's own `Browser` and a query
  typed into it is searched by the kernel's event loop (the debounce path `Browser.wait` covers in the notebook).

Nothing under nbs/, prx_nb/ or the user's home is written: Jupyter's settings, workspaces and runtime files and the
kernels' temporary folders go to the test's folder. Screenshots go to tests/out/ (lab*.png)."""
import contextlib, json, os, re, shutil, signal, socket, subprocess, sys, time
from pathlib import Path
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_browser_e2e import CHROMIUM, ARGS, free_port  # noqa: E402  the browser and its flags, as the Voila test uses them
ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists() or shutil.which('jupyter-lab', path=str(BIN)) is None,
                                 reason='needs Debian chromium and jupyterlab (./dev setup installs both)')]
TOKEN = 'prx-lab-e2e'


def stop(p):
    "End the server's process group and every process it started (kernels run in sessions of their own)."
    import psutil
    try: kids = psutil.Process(p.pid).children(recursive=True)
    except psutil.NoSuchProcess: kids = []
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try: os.killpg(p.pid, sig)
        except ProcessLookupError: pass
        for k in kids:
            try: k.send_signal(sig)
            except psutil.NoSuchProcess: pass
        try: p.wait(wait)
        except subprocess.TimeoutExpired: continue
        if not psutil.wait_procs(kids, timeout=wait)[1]: return


@contextlib.contextmanager
def serve(d:Path, root:Path):
    """Start `./dev lab` on `root`, all of Jupyter's own files under `d`; yields (base URL, log tail) and ends it with
    every kernel it started."""
    # JupyterLab's own settings: no news or update check (nothing leaves the machine, no toast over the page), and
    # every cell of a notebook kept in the page (no windowing), so the test reads all of them
    cfg = d / 'settings' / '@jupyterlab'
    for ext, name, value in (('apputils-extension', 'notification', dict(fetchNews='false', checkForUpdates=False)),
                             ('notebook-extension', 'tracker', dict(windowingMode='none'))):
        (cfg / ext).mkdir(parents=True, exist_ok=True)
        (cfg / ext / f'{name}.jupyterlab-settings').write_text(json.dumps(value))
    (d / 'tmp').mkdir(exist_ok=True)        # the kernels' tempfile folders (the notebooks build demo corpora there)
    env = {**os.environ, 'PATH': f"{BIN}:{os.environ['PATH']}", 'JUPYTER_CONFIG_DIR': str(d / 'config'), 'JUPYTER_DATA_DIR': str(d / 'data'),
           'JUPYTER_RUNTIME_DIR': str(d / 'runtime'), 'IPYTHONDIR': str(d / 'ipython'), 'TMPDIR': str(d / 'tmp'),
           'JUPYTERLAB_SETTINGS_DIR': str(d / 'settings'), 'JUPYTERLAB_WORKSPACES_DIR': str(d / 'workspaces')}
    port, logf = free_port(), d / 'lab.log'
    log = open(logf, 'w')
    # ./dev lab itself (its set-up is a no-op once done); the options it passes on replace its default root, nbs/
    p = subprocess.Popen([ROOT / 'dev', 'lab', '--no-browser', f'--port={port}', f'--ServerApp.root_dir={root}',
                          f'--IdentityProvider.token={TOKEN}', '--LabApp.news_url=None', '--LabApp.extension_manager=readonly'],
                         stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    tail = lambda: logf.read_text()[-3000:]
    try:
        for _ in range(240):
            if p.poll() is not None: pytest.fail(f'./dev lab exited with {p.returncode}:\n' + tail())
            try:
                with socket.create_connection(('127.0.0.1', port), timeout=1): break
            except OSError: time.sleep(0.5)
        else: pytest.fail('./dev lab did not start:\n' + tail())
        yield f'http://127.0.0.1:{port}', tail
    finally: stop(p); log.close()


@pytest.fixture
def lab(tmp_path_factory):
    from prx_nb.pipeline import run_demo
    d = tmp_path_factory.mktemp('lab')
    run = run_demo(d / 'demo', progress=False)          # tagged, embedded and indexed by the demo itself
    nbs = d / 'nbs'; nbs.mkdir()
    nb = dict(cells=[dict(cell_type='code', metadata={}, execution_count=None, outputs=[], id='a1',
                          source=f"from prx_nb.explore import Browser\nBrowser({run.table!r}, page_size=8, debounce=0.3)")],
              metadata=dict(kernelspec=dict(name='python3', display_name='python3', language='python')), nbformat=4, nbformat_minor=5)
    (nbs / 'app.ipynb').write_text(json.dumps(nb))
    with serve(d, nbs) as (base, tail): yield f'{base}/lab/tree/app.ipynb?token={TOKEN}', run, d, tail


def open_and_run_all(page, url:str):
    "Open the notebook at `url`, wait for its kernel (python3, ./dev lab's) to start and be idle, then Run > Run All Cells."
    resp = page.goto(url, timeout=120_000)
    assert resp is not None and resp.ok, f'GET {url} answered {resp and resp.status}'
    page.locator('.jp-NotebookPanel .jp-Cell').first.wait_for(timeout=120_000)
    # (read together: before the kernel starts, the indicator already says idle beside 'No Kernel', and Run All
    # then asks which kernel to start)
    page.wait_for_function("""() => { const p = document.querySelector('.jp-NotebookPanel');
        const name = p && p.querySelector('.jp-Toolbar-kernelName'), ind = p && p.querySelector('.jp-Notebook-ExecutionIndicator');
        return name && ind && name.textContent.trim() === 'Python 3 (prx_nb)' && ind.dataset.status === 'idle' }""", timeout=120_000)
    page.get_by_role('menuitem', name='Run', exact=True).click()
    page.get_by_role('menuitem', name=re.compile(r'^Run All Cells')).click()


def test_lab_run_type_and_click(lab):
    from playwright.sync_api import sync_playwright, expect
    url, run, d, tail = lab
    out = ROOT / 'tests' / 'out'; out.mkdir(exist_ok=True)
    ids = lambda where: page.locator(f'{where} .prx-id').all_text_contents()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport=dict(width=1400, height=1600))
        page.route(re.compile(r'^https?://(?!127\.0\.0\.1[:/])'), lambda route: route.abort())   # nothing leaves the machine
        try:
            open_and_run_all(page, url)
            box = page.locator('.prx-query input')
            err = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').filter(has_text='Traceback')
            box.or_(err).first.wait_for(timeout=180_000)                       # the kernel ran the cell: widgets rendered, or it raised
            if err.count(): pytest.fail('the notebook raised:\n' + err.first.inner_text())
            expect(page.locator('.prx-grid .prx-thumb')).to_have_count(8, timeout=60_000)
            first = ids('.prx-grid')
            box.click(); box.press_sequentially('web site', delay=60)           # typed key by key, as a person would
            text_ids = set(run.truth.text)
            page.wait_for_function("""ids => { const got = [...document.querySelectorAll('.prx-grid .prx-id')].map(e => e.textContent);
                                               return got.filter(i => ids.includes(i)).length >= 5 }""", arg=sorted(text_ids), timeout=60_000)
            shown = ids('.prx-grid')
            assert shown != first and len(set(shown) & text_ids) >= 5, (first, shown)
            assert 'web site' in page.locator('.prx-info').text_content()
            page.locator('.prx-grid .prx-thumb').first.get_by_role('button', name='similar').click()
            expect(page.locator('.prx-neighbours-title')).to_contain_text(f'Neighbours of {shown[0]}', timeout=60_000)
            expect(page.locator('.prx-neighbours .prx-thumb')).to_have_count(8, timeout=60_000)
            neighbours = ids('.prx-neighbours')
            assert shown[0] not in neighbours and neighbours != shown and len(set(neighbours) & text_ids) >= 4, neighbours
            assert page.evaluate("[...document.querySelectorAll('.prx-grid img')].every(i => i.complete && i.naturalWidth > 0)")
            assert err.count() == 0 and 'Traceback' not in page.locator('.jp-OutputArea').first.inner_text()
            page.screenshot(path=str(out / 'lab.png'), full_page=True)
        except BaseException:                                                  # pytest.fail's too
            page.screenshot(path=str(out / 'lab_failure.png'), full_page=True)
            print('--- ./dev lab log (tail):\n' + tail())
            raise
        finally: browser.close()


EXPLORE = '05_explore.ipynb'
# the notebook's kernel done with Run All: idle, no cell queued or running ([*]), and either every code cell numbered or
# an error shown (the kernel then drops the cells queued after it, which JupyterLab leaves unnumbered)
RUN_ALL_DONE = """() => { const p = document.querySelector('.jp-NotebookPanel');
    const ind = p && p.querySelector('.jp-Notebook-ExecutionIndicator');
    if (!ind || ind.dataset.status !== 'idle') return false;
    const prompts = [...p.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(e => e.textContent.trim());
    if (prompts.some(t => t.includes('*'))) return false;
    return prompts.every(t => /^\\[\\d+\\]:$/.test(t))
        || [...p.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
             .some(e => /Traceback|^\\w*(Error|Exception)\\b/m.test(e.textContent)) }"""
ANSI = re.compile(r'\x1b\[[0-9;]*[A-Za-z]')


@pytest.fixture
def lab_repo(tmp_path_factory):
    """`./dev lab` on a copy of nbs/ in a tree shaped like the repository's: <tmp>/repo/nbs and <tmp>/repo/settings.ini.
    05_explore builds its demo corpus in a temporary folder and reads no `../` path; settings.ini is there for its last
    cell, `nbdev_export()` (Jupyter runs it; nbdev_test skips it), which needs an nbdev project around the notebook and
    then writes <tmp>/repo/prx_nb, not the repository's prx_nb/."""
    d = tmp_path_factory.mktemp('lab_explore')
    repo = d / 'repo'
    shutil.copytree(ROOT / 'nbs', repo / 'nbs', ignore=shutil.ignore_patterns('.ipynb_checkpoints', '__pycache__'))
    shutil.copy(ROOT / 'settings.ini', repo / 'settings.ini')
    with serve(d, repo / 'nbs') as (base, tail): yield base, repo, tail


def cell_report(nb:dict)->tuple[list, str|None]:
    "The code cells of a saved notebook as (index, id, source), and what is wrong with the first failing one (or None)."
    cells = [(i, c.get('id'), ''.join(c['source'])) for i, c in enumerate(nb['cells']) if c['cell_type'] == 'code']
    for (i, cid, src), c in zip(cells, [c for c in nb['cells'] if c['cell_type'] == 'code']):
        head = f'cell {i} (id {cid}) starting {src[:160]!r}'
        err = next((o for o in c.get('outputs', []) if o.get('output_type') == 'error'), None)
        if err: return cells, f"{head} raised {err['ename']}: {err['evalue']}\n" + ANSI.sub('', '\n'.join(err['traceback']))[-3000:]
        if c.get('execution_count') is None: return cells, f'{head} has no number: it did not run, or had not finished'
    return cells, None


def save(page, path:Path)->dict:
    "Save the open notebook (Ctrl+S, as a person would) and read it back from `path`."
    before = path.stat().st_mtime_ns
    page.locator('.jp-NotebookPanel .jp-Notebook').first.focus()
    page.keyboard.press('Control+s')
    for _ in range(120):
        if path.stat().st_mtime_ns != before:
            try: return json.loads(path.read_text())   # Jupyter writes a whole new file and moves it in place
            except json.JSONDecodeError: pass
        time.sleep(0.25)
    pytest.fail(f'JupyterLab did not save {path.name}')


def test_lab_runs_05_explore(lab_repo):
    from playwright.sync_api import sync_playwright, expect
    base, repo, tail = lab_repo
    path, out = repo / 'nbs' / EXPLORE, ROOT / 'tests' / 'out'; out.mkdir(exist_ok=True)
    n_code = sum(c['cell_type'] == 'code' for c in json.loads(path.read_text())['cells'])
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport=dict(width=1400, height=1600))
        page.route(re.compile(r'^https?://(?!127\.0\.0\.1[:/])'), lambda route: route.abort())   # nothing leaves the machine
        problem = None
        try:
            t0 = time.time()
            open_and_run_all(page, f'{base}/lab/tree/{EXPLORE}?token={TOKEN}')
            prompts = page.locator('.jp-NotebookPanel .jp-CodeCell .jp-InputPrompt')
            expect(prompts).to_have_count(n_code, timeout=60_000)
            page.wait_for_function(RUN_ALL_DONE, timeout=600_000, polling=500)
            print(f'{EXPLORE}: Run All took {time.time() - t0:.0f} s')
            # what ran, read from the notebook as JupyterLab saves it: each cell's number and its outputs, errors typed
            cells, problem = cell_report(save(page, path))
            if problem: pytest.fail(f'{EXPLORE} failed in JupyterLab: {problem}')
            shown = [t.strip() for t in prompts.all_text_contents()]
            assert all(re.fullmatch(r'\[\d+\]:', t) for t in shown), shown
            errs = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').filter(has_text='Traceback')
            assert errs.count() == 0, errs.first.inner_text()
            # the notebook's own Browser `b` (left by its cells on 'espresso', debounce off), shown by a cell added at the
            # end; a query typed into it is searched after the pause by the kernel's loop (call_later), not a cell
            last = page.locator('.jp-NotebookPanel .jp-Cell').last
            last.locator('.jp-InputPrompt').click()
            page.keyboard.press('Escape'); page.keyboard.press('b')          # a new code cell below, selected
            expect(page.locator('.jp-NotebookPanel .jp-CodeCell')).to_have_count(n_code + 1, timeout=30_000)
            page.keyboard.press('Enter')                                      # into its editor
            page.keyboard.type('b.debounce = 0.3\nb')
            page.keyboard.press('Shift+Enter')
            box = page.locator('.prx-query input')
            expect(box).to_be_visible(timeout=60_000)
            expect(box).to_have_value('espresso')
            expect(page.locator('.prx-grid .prx-id').first).to_have_text('hf_photos/skimage__coffee.png', timeout=30_000)
            box.fill(''); box.press_sequentially('web site', delay=60)
            expect(page.locator('.prx-info')).to_contain_text('web site', timeout=30_000)
            page.wait_for_function("""() => [...document.querySelectorAll('.prx-grid .prx-id')]
                                               .filter(e => e.textContent.startsWith('web_crawl/')).length >= 3""", timeout=30_000)
            assert page.locator('.prx-message').first.inner_text().strip() == ''
            page.locator('.prx-grid').first.scroll_into_view_if_needed()
            page.screenshot(path=str(out / 'lab_explore.png'))
        except BaseException as e:                                             # pytest.fail's too
            if problem is None and not isinstance(e, pytest.fail.Exception):   # name the failing cell when the page shows one
                try:
                    problem = cell_report(save(page, path))[1]
                except Exception: pass
                if problem: print(f'--- {EXPLORE}: {problem}')
            try: page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').filter(
                     has_text='Traceback').first.scroll_into_view_if_needed(timeout=2_000)   # the error in the picture
            except Exception: pass
            page.screenshot(path=str(out / 'lab_explore_failure.png'))
            print('--- ./dev lab log (tail):\n' + tail())
            raise
        finally: browser.close()
