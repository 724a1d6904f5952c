"Captioning over HTTP: a fault-injecting OpenAI-compatible server on loopback, a real `transformers serve` on the tiny model, and a killed run resumed."
import json, signal, socket, subprocess, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import lance
import pytest
from conftest import BIN
from prx_nb.table import Actors
from prx_nb.caption import CaptionSpec, CaptionerError, OpenAICaptioner, caption_table, prepare_image
from prx_nb.testing import tiny_vlm, transformers_serve
from prx_nb.core import Engine
from prx_nb.testing import tiny_image
from prx_nb.demo import demo_sources
from prx_nb.ingest import ingest


class Script(BaseHTTPRequestHandler):
    "Answers chat completions as its class-level `plan` says, one behaviour per request, on 127.0.0.1 only."
    plan, served = [], ['tiny']
    def log_message(self, *a): pass
    def _send(self, code, body, ctype='application/json'):
        b = body.encode(); self.send_response(code); self.send_header('Content-Type', ctype); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self):
        self._send(200, json.dumps(dict(object='list', data=[dict(id=m) for m in self.served])))
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
        if body['model'] not in self.served: return self._send(404, json.dumps(dict(error=dict(message=f"The model `{body['model']}` does not exist."))))
        how = self.plan.pop(0) if self.plan else 'ok'
        ev = lambda d: 'data: ' + json.dumps(d) + '\n\n'
        text, finish = dict(ok=('A red bicycle leans on a wall.', 'stop'), refusal=("I'm sorry, I can't help with that.", 'stop'),
                            length=('A red bicycle', 'length'), empty=('', 'stop')).get(how, (None, None))
        if how == '500': return self._send(500, 'Internal Server Error', 'text/plain')
        if how == '400': return self._send(400, json.dumps(dict(error=dict(message='image could not be decoded'))))
        if how == 'slow': time.sleep(1.0)
        if how == 'drop': self.connection.shutdown(socket.SHUT_RDWR); return
        self.send_response(200); self.send_header('Content-Type', 'text/event-stream'); self.end_headers()
        if how == 'malformed': self.wfile.write(b'data: {"choices": [\n\n'); return
        if how == 'slow': text, finish = 'A slow answer.', 'stop'
        self.wfile.write((ev(dict(choices=[dict(delta=dict(content=text), finish_reason=finish)])) + 'data: [DONE]\n\n').encode())


@pytest.fixture
def server():
    s = ThreadingHTTPServer(('127.0.0.1', 0), Script); t = threading.Thread(target=s.serve_forever, daemon=True); t.start()
    yield f'http://127.0.0.1:{s.server_address[1]}/v1'
    s.shutdown(); Script.plan = []


def test_retries_and_bad_replies(server):
    c = OpenAICaptioner(server, CaptionSpec('tiny'), concurrency=1, timeout=0.5, retries=2, backoff=0.01)
    jpg = prepare_image(tiny_image(64, 48))[0]
    for plan, want in [(['500', 'ok'], 'ok'), (['malformed', 'ok'], 'ok'), (['drop', 'ok'], 'ok'), (['slow', 'ok'], 'ok'),
                       (['500', '500', '500'], 'error'), (['400'], 'rejected'), (['refusal'], 'refusal'), (['length'], 'truncated'), (['empty'], 'empty')]:
        Script.plan = list(plan)
        r = c.caption([jpg])[0]
        assert r.status == want, (plan, r)
        assert (r.text is not None) == (want == 'ok')
        assert Script.plan == [], plan  # every planned answer was asked for: the retries happened
    Script.plan = ['ok'] * 6
    assert [r.status for r in OpenAICaptioner(server, CaptionSpec('tiny'), concurrency=3).caption([jpg] * 6)] == ['ok'] * 6


def test_configuration_errors_say_what_to_do(server):
    with pytest.raises(CaptionerError, match='does not serve|did not answer for model') as e: OpenAICaptioner(server, CaptionSpec('Qwen/other'))
    assert "'tiny'" in str(e.value) or 'tiny' in str(e.value)
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
    with pytest.raises(CaptionerError, match='cannot reach .* Is the server running'): OpenAICaptioner(f'http://127.0.0.1:{port}/v1', CaptionSpec('tiny'))


def free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


def test_real_server_captions_the_demo_in_place(tmp_path, demo):
    "`transformers serve` (a real OpenAI-compatible server process) on the tiny model; the runner writes captions back."
    mdir = tiny_vlm(tmp_path / 'tiny')
    with transformers_serve(mdir, tmp_path) as url:
        t = str(tmp_path / 't.lance'); ingest(t, demo_sources(demo), progress=False)
        c = OpenAICaptioner(url, CaptionSpec(mdir, max_new_tokens=16, max_pixels=128 * 128), concurrency=4)
        r = subprocess.run([str(BIN / 'prx_caption'), '--table', t, '--endpoint', url, '--model', mdir, '--column', 'served',
                            '--max-new-tokens', '16', '--max-pixels', str(128 * 128), '--limit', '12', '--quiet'], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        assert '12 rows captioned into caption_served' in r.stdout
        ds = lance.dataset(t)
        assert ds.count_rows('caption_served_status IS NOT NULL') == 12
        assert ds.count_rows("caption_served_status = 'ok'") + ds.count_rows("caption_served_status LIKE 'truncated%'") == 12
        run = caption_table(t, c, 'served', progress=False)  # the rest of the demo, same column: only rows without an outcome
        n_ok = lance.dataset(t).count_rows("status = 'ok'")
        assert run.rows == n_ok - 12 and lance.dataset(t).count_rows('caption_served_status IS NOT NULL') == n_ok


def test_killed_caption_run_resumes(tmp_path, demo):
    mdir = tiny_vlm(tmp_path / 'tiny')
    t = str(tmp_path / 't.lance'); ingest(t, demo_sources(demo), progress=False)
    n_ok, v0 = lance.dataset(t).count_rows("status = 'ok'"), lance.dataset(t).version
    cmd = [str(BIN / 'prx_caption'), '--table', t, '--backend', 'transformers', '--model', mdir, '--column', 'k', '--batch-size', '2',
           '--commit-rows', '4', '--max-new-tokens', '8', '--quiet']
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while time.time() < deadline and lance.dataset(t).version < v0 + 4: time.sleep(0.05)  # columns added, metadata set, two commits
    p.send_signal(signal.SIGKILL); p.wait()
    done = lance.dataset(t).count_rows('caption_k_status IS NOT NULL')
    assert 0 < done < n_ok, f'the kill did not land mid-run ({done} of {n_ok})'
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert f'{n_ok - done:,} rows captioned' in r.stdout  # only what was missing
    ds = lance.dataset(t)
    assert ds.count_rows('caption_k_status IS NOT NULL') == n_ok and ds.count_rows() == lance.dataset(t, version=v0).count_rows()


def test_ray_pipeline_matches_local(tmp_path, demo):
    "The streaming Ray Data pipeline (read, prepare on CPU workers, caption on actors, write back) gives the local run's captions."
    from prx_nb.caption import Backend
    mdir = tiny_vlm(tmp_path / 'tiny')
    a, b = str(tmp_path / 'a.lance'), str(tmp_path / 'b.lance')
    for t in (a, b): ingest(t, demo_sources(demo), progress=False)
    be = Backend('transformers', CaptionSpec(mdir, max_new_tokens=12, max_pixels=128 * 128), batch_size=4)
    la = caption_table(a, be, 'x', batch_size=4, commit_rows=8, progress=False)
    rb = caption_table(b, be, 'x', batch_size=4, commit_rows=8, engine=Engine('ray', workers=2), actors=Actors(2, cpus=0.5), progress=False)
    assert la.rows == rb.rows == lance.dataset(a).count_rows("status = 'ok'")
    ta, tb = (lance.dataset(t).to_table(columns=['id', 'caption_x', 'caption_x_status']).sort_by('id') for t in (a, b))
    assert ta.equals(tb)
    with pytest.raises(ValueError, match='pass a Backend'): caption_table(a, be.make(), 'y', engine='ray')
