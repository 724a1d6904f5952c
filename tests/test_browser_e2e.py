"""The browser end to end in a real page: Voilà serves a notebook showing `Browser` over the demo corpus, Debian's
headless Chromium driven by Playwright types a query and clicks "similar" under a thumbnail, and the test checks
what the page shows. The screenshot goes to tests/out/browser.png (PRX_UPDATE_SCREENSHOT=1 also copies it to
nbs/images/browser.png, which the docs show)."""
import json, os, re, shutil, signal, socket, subprocess, sys, time
from pathlib import Path
import pytest

CHROMIUM = shutil.which('chromium') or '/usr/bin/chromium'
ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists() or shutil.which('voila', path=str(Path(sys.executable).parent)) is None,
                                reason='needs Debian chromium and voila (./dev setup installs both)')
ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage']


def free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


@pytest.fixture(scope='module')
def app(tmp_path_factory):
    from prx_nb.pipeline import run_demo
    d = tmp_path_factory.mktemp('e2e')
    run = run_demo(d / 'demo', progress=False)          # tagged, embedded and indexed by the demo itself
    nb = dict(cells=[dict(cell_type='code', metadata={}, execution_count=None, outputs=[], id='a1',
                          source=f"from prx_nb.explore import Browser\nBrowser({run.table!r}, page_size=8, debounce=0.3)")],
              metadata=dict(kernelspec=dict(name='python3', display_name='python3', language='python')), nbformat=4, nbformat_minor=5)
    (d / 'app.ipynb').write_text(json.dumps(nb))
    port = free_port()
    log = open(d / 'voila.log', 'w')
    env = {**os.environ, 'PATH': f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    p = subprocess.Popen([Path(sys.executable).parent / 'voila', 'app.ipynb', '--no-browser', f'--port={port}', '--Voila.ip=127.0.0.1',
                          '--token=', '--show_tracebacks=True'], cwd=d, stdout=log, stderr=subprocess.STDOUT, env=env,
                         start_new_session=True)                         # its own process group: the kernel goes with it
    for _ in range(120):
        try:
            with socket.create_connection(('127.0.0.1', port), timeout=1): break
        except OSError: time.sleep(0.5)
    else: os.killpg(p.pid, signal.SIGKILL); pytest.fail('voila did not start: ' + (d / 'voila.log').read_text()[-2000:])
    yield f'http://127.0.0.1:{port}/', run, d
    try: os.killpg(p.pid, signal.SIGTERM); p.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try: os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError: pass


def test_type_and_click(app):
    from playwright.sync_api import sync_playwright, expect
    url, run, d = app
    out = ROOT / 'tests' / 'out'; out.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport=dict(width=1280, height=1400))
        page.route(re.compile(r'^https?://(?!127\.0\.0\.1[:/])'), lambda route: route.abort())   # the template's CDN links: nothing leaves the machine
        try:
            resp = page.goto(url, timeout=120_000)
            assert resp is not None and resp.ok, f'GET / answered {resp and resp.status}: ' + (d / 'voila.log').read_text()[-2000:]
            box = page.locator('.prx-query input')
            err = page.get_by_text(re.compile(r'Traceback \(most recent call last\)|There was an error when executing cell'))
            box.or_(err).first.wait_for(timeout=120_000)                       # the kernel ran the cell: widgets rendered, or it raised
            if err.count(): pytest.fail('the notebook raised:\n' + err.first.inner_text())
            expect(page.locator('.prx-grid .prx-thumb')).to_have_count(8, timeout=60_000)
            box.click(); box.press_sequentially('web site', delay=60)           # typed key by key, as a person would
            text_ids = set(run.truth.text)
            page.wait_for_function("""ids => { const got = [...document.querySelectorAll('.prx-grid .prx-id')].map(e => e.textContent);
                                               return got.filter(i => ids.includes(i)).length >= 5 }""", arg=sorted(text_ids), timeout=60_000)
            shown = page.locator('.prx-grid .prx-id').all_text_contents()
            assert len(set(shown) & text_ids) >= 5, shown
            assert 'web site' in page.locator('.prx-info').text_content()
            page.locator('.prx-grid .prx-thumb').first.get_by_role('button', name='similar').click()
            title = page.locator('.prx-neighbours-title')
            expect(title).to_contain_text(f'Neighbours of {shown[0]}', timeout=60_000)
            expect(page.locator('.prx-neighbours .prx-thumb')).to_have_count(8, timeout=60_000)
            neighbours = page.locator('.prx-neighbours .prx-id').all_text_contents()
            assert shown[0] not in neighbours and len(set(neighbours) & text_ids) >= 4, neighbours
            imgs = page.locator('.prx-grid img')
            assert imgs.count() == 8 and page.evaluate("[...document.querySelectorAll('.prx-grid img')].every(i => i.complete && i.naturalWidth > 0)")
            page.screenshot(path=str(out / 'browser.png'), full_page=True)
        except Exception:
            page.screenshot(path=str(out / 'browser_failure.png'), full_page=True)
            print((d / 'voila.log').read_text()[-3000:])
            raise
        finally: browser.close()
    if os.environ.get('PRX_UPDATE_SCREENSHOT') == '1':
        (ROOT / 'nbs' / 'images').mkdir(exist_ok=True); shutil.copy(out / 'browser.png', ROOT / 'nbs' / 'images' / 'browser.png')
