"Structured tags end to end: a killed `prx_tag` resumed, the Ray fill, a real `transformers serve` that accepts the schema without enforcing it, a server that enforces it, and the browser's facets."
import json, signal, subprocess, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import lance
import pytest
from conftest import BIN
from prx_nb.core import Engine
from prx_nb.table import Actors
from prx_nb.caption import Backend, OpenAICaptioner
from prx_nb.tags import tag_schema, tag_spec, tag_table, parse_tags
from prx_nb.testing import tiny_vlm, transformers_serve
from prx_nb.demo import demo_sources
from prx_nb.ingest import ingest


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    return tiny_vlm(tmp_path_factory.mktemp('tiny') / 'vlm')


def fresh(tmp_path, demo, name='t.lance'):
    t = str(tmp_path / name)
    ingest(t, demo_sources(demo), progress=False)
    return t


def tags_of(t):
    return lance.dataset(t).to_table(filter="status = 'ok'").to_pandas().sort_values('id').reset_index(drop=True)


SMALL = {'kind': ['photo', 'render'], 'people': 'int 0..3'}  # short answers: quick tests


def test_killed_tag_run_resumes(tmp_path, demo, tiny):
    "A SIGKILL mid-run loses at most the uncommitted rows; the rerun tags only what is missing, every answer schema-valid."
    t = fresh(tmp_path, demo)
    n_ok, v0 = lance.dataset(t).count_rows("status = 'ok'"), lance.dataset(t).version
    (tmp_path / 'small.json').write_text(json.dumps(SMALL))
    cmd = [str(BIN / 'prx_tag'), '--table', t, '--backend', 'transformers', '--model', tiny, '--batch-size', '8', '--schema',
           str(tmp_path / 'small.json'), '--commit-rows', '16', '--max-pixels', str(128 * 128), '--quiet']
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while time.time() < deadline and lance.dataset(t).version < v0 + 4: time.sleep(0.05)  # columns, metadata, two commits
    p.send_signal(signal.SIGKILL); p.wait()
    done = lance.dataset(t).count_rows('tag_status IS NOT NULL')
    assert 0 < done < n_ok, f'the kill did not land mid-run ({done} of {n_ok})'
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith(f'{n_ok - done:,} rows tagged into tag_kind, tag_people of')
    assert '100% schema-valid' in r.stdout
    df = tags_of(t)
    assert len(df) == n_ok == lance.dataset(t, version=v0).count_rows("status = 'ok'")
    assert (df.tag_status == 'ok').all() and df.tag_kind.notna().all() and df.tag_people.between(0, 3).all()
    for _, row in df.iterrows():  # each stored row is a schema-valid answer
        assert parse_tags(json.dumps(dict(kind=row.tag_kind, people=int(row.tag_people))), tag_schema(SMALL))[1] == 'ok'


@pytest.mark.slow
def test_ray_tags_match_local(tmp_path, demo, tiny):
    "The Ray fill (a tagger built per actor from a `Backend`) stores the local run's tags, row for row."
    a, b = fresh(tmp_path, demo, 'a.lance'), fresh(tmp_path, demo, 'b.lance')
    be = Backend('transformers', tag_spec(tiny, tag_schema(SMALL), max_pixels=128 * 128), batch_size=8)
    la = tag_table(a, be.make(), batch_size=8, commit_rows=16, limit=32, progress=False)
    rb = tag_table(b, be, batch_size=8, commit_rows=16, limit=32, engine=Engine('ray', workers=2), actors=Actors(2, cpus=0.5), progress=False)
    assert la.rows == rb.rows == 32 and la.statuses == rb.statuses == {'ok': 32}
    cols = ['id', *la.columns, 'tag_status']
    ta, tb = (tags_of(x)[cols].dropna(subset=['tag_status']).reset_index(drop=True) for x in (a, b))
    assert len(ta) == 32 and ta.equals(tb)


@pytest.mark.slow
def test_transformers_serve_answers_are_validated(tmp_path, demo, tiny):
    "`transformers serve` takes `response_format` and does not enforce it: every free-text answer is a row with its reason."
    t = fresh(tmp_path, demo)
    with transformers_serve(tiny, tmp_path) as url:
        c = OpenAICaptioner(url, tag_spec(tiny, max_new_tokens=40, max_pixels=128 * 128), concurrency=4)
        r = tag_table(t, c, limit=16, progress=False)
    assert c.constrain  # the server accepted the field
    assert r.rows == 16 and r.statuses.get('ok', 0) < 16 and set(r.statuses) <= {'ok', 'invalid', 'truncated', 'empty', 'refusal'}
    df = lance.dataset(t).to_table(filter='tag_status IS NOT NULL').to_pandas()
    assert len(df) == 16 and df[df.tag_status != 'ok'].tag_kind.isna().all()
    assert df.tag_status[df.tag_status != 'ok'].str.match(r'^(invalid|truncated|empty|refusal): .+').all()


class Enforcing(BaseHTTPRequestHandler):
    "An OpenAI-compatible server that answers every request that carries a json_schema `response_format` with a valid object, and refuses one without it."
    seen = []
    def log_message(self, *a): pass
    def _send(self, code, body):
        b = body.encode(); self.send_response(code); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self): self._send(200, json.dumps(dict(data=[dict(id='tiny')])))
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
        self.seen.append(body)
        rf = body.get('response_format') or {}
        if rf.get('type') != 'json_schema': return self._send(400, json.dumps(dict(error='no schema')))
        s = rf['json_schema']['schema']['properties']
        ans = {k: v['enum'][-1] if 'enum' in v else {'boolean': True, 'integer': v.get('maximum', 1)}.get(v.get('type'), 'x') for k, v in s.items()}
        ev = lambda d: 'data: ' + json.dumps(d) + '\n\n'
        self._send(200, ev(dict(choices=[dict(delta=dict(content=json.dumps(ans)), finish_reason='stop')])) + ev(dict(choices=[], usage=dict(completion_tokens=9))) + 'data: [DONE]\n\n')


def test_served_schema_reaches_the_server(tmp_path, demo):
    "The schema travels as `response_format`; what the server answers under it lands in the typed columns."
    srv = ThreadingHTTPServer(('127.0.0.1', 0), Enforcing)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        t = fresh(tmp_path, demo)
        schema = tag_schema({'kind': ['photo', 'render'], 'people': 'int 0..3', 'outdoor': 'bool'})
        r = tag_table(t, OpenAICaptioner(f'http://127.0.0.1:{srv.server_port}/v1', tag_spec('tiny', schema)), progress=False)
    finally: srv.shutdown()
    assert Enforcing.seen[0]['response_format']['json_schema']['schema'] == schema
    assert r.statuses == {'ok': r.rows} and r.rows == lance.dataset(t).count_rows("status = 'ok'")
    df = tags_of(t)
    assert (df.tag_kind == 'render').all() and (df.tag_people == 3).all() and df.tag_outdoor.all()


def test_browser_facets_filter_and_count(tmp_path, demo, tiny):
    "Facet buttons show counts per value under the other filters; choosing one filters the grid; the fixed where= holds."
    from prx_nb.explore import Browser, facet_counts, facet_columns
    from prx_nb.table import write_back
    import pyarrow as pa
    t = fresh(tmp_path, demo)
    ds = lance.dataset(t)
    ok = ds.to_table(columns=['id'], filter="status = 'ok'", with_row_id=True)
    n = ok.num_rows
    kinds = ['photo' if i % 3 else 'render' for i in range(n)]
    write_back(t, pa.table({'_rowid': ok['_rowid'], 'tag_kind': pa.array(kinds), 'tag_people': pa.array([i % 2 for i in range(n)], pa.int64()),
                            'tag_status': pa.array(['ok'] * n)}))
    assert facet_columns(lance.dataset(t)) == ['tag_kind', 'tag_people']
    fc = facet_counts(t, 'tag_kind')
    assert dict(zip(fc.value, fc.rows)) == {'photo': kinds.count('photo'), 'render': kinds.count('render')}
    b = Browser(t, page_size=200, debounce=0)
    labels = [l for l, _ in b.facets['tag_kind'].options]
    assert f"render ({kinds.count('render')})" in labels
    b.facet('tag_kind', 'render')
    ids = set(ok['id'].to_pylist()[i] for i, k in enumerate(kinds) if k == 'render')
    assert set(b.grid_ids) == ids
    people = dict(b.facets['tag_people'].options)  # counts under the kind chosen
    assert sum(int(l.split('(')[1][:-1]) for l in people if l != 'any') == len(ids)
    b.facets['tag_kind'].value = None
    assert len(b.grid_ids) == n
    c = Browser(t, page_size=200, debounce=0, where='tag_people = 1', facets=[])
    assert not c.facets and len(c.grid_ids) == sum(i % 2 for i in range(n))


@pytest.mark.slow
def test_prx_run_tags_and_views_stages(tmp_path, demo, tiny):
    "[tags], [semdedup] and [views] in a run: every usable row tagged under the schema file, concept near-duplicates skipped, views made over the tree from tag and size predicates; a rerun skips all three."
    from prx_nb.pipeline import run_pipeline
    (tmp_path / 'schema.json').write_text(json.dumps({'kind': ['photo', 'other'], 'outdoor': 'bool'}))
    c = dict(run=dict(out=str(tmp_path / 'run')), ingest=dict(sources=demo_sources(demo)), mds=dict(part_rows=16),
             tags=dict(enabled=True, backend='transformers', model=tiny, schema=str(tmp_path / 'schema.json'), max_pixels=128 * 128, batch_size=16),
             semdedup=dict(enabled=True, k=4, threshold=0.9),
             views=dict(create={'wide': 'width > height', 'tagged_wide': "tag_status = 'ok' AND width > height"}))
    s = run_pipeline(c, progress=False)
    t = str(tmp_path / 'run' / 'corpus.lance')
    n_ok = lance.dataset(t).count_rows("status = 'ok'")
    r = s.stage('tags')
    assert r.status == 'ran' and r.rows_in == r.rows_out == n_ok and r.outputs['columns'] == 'tag_kind,tag_outdoor'
    assert lance.dataset(t).count_rows("tag_status = 'ok' AND tag_kind IS NOT NULL") == n_ok
    from prx_nb.views import list_views
    from prx_nb.loader import tree_dataset
    v = s.stage('views')
    assert v.status == 'ran' and set(v.outputs) == {'wide', 'tagged_wide'}
    assert list(list_views(tmp_path / 'run' / 'mds').sort_values('name').name) == ['tagged_wide', 'wide']
    wide = set(lance.dataset(t).to_table(columns=['id'], filter='width > height')['id'].to_pylist())
    served = {x['id'] for x in tree_dataset(tmp_path / 'run' / 'mds', batch_size=1, view='wide', on_skip='drop', reasons=[], shuffle=False)}
    assert served and served <= wide
    again = run_pipeline(c, progress=False)
    assert again.stage('tags').status == again.stage('views').status == again.stage('semdedup').status == 'skipped'
    sd = s.stage('semdedup')
    assert sd.status == 'ran' and sd.reasons['semdedup'] > 0 and sd.outputs['clusters'] == 4
    assert lance.dataset(t).count_rows('cluster IS NOT NULL') == n_ok


def test_schema_mistakes_name_the_field_and_names_keep_runs_apart(tmp_path, demo):
    "A field that would clash with the outcome column, or a type a column cannot hold, is refused naming it; a run under one name never drops another name's columns."
    with pytest.raises(ValueError, match="'status'"): tag_schema({'status': 'bool'})
    with pytest.raises(ValueError, match="'ok_status'"): tag_schema({'ok_status': 'bool'})
    with pytest.raises(ValueError, match="tag field 'a'.*not supported"):
        tag_schema({'type': 'object', 'properties': {'a': {'type': ['string', 'null']}}})
    srv = ThreadingHTTPServer(('127.0.0.1', 0), Enforcing)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        t = fresh(tmp_path, demo)
        url = f'http://127.0.0.1:{srv.server_port}/v1'
        tag_table(t, OpenAICaptioner(url, tag_spec('tiny', tag_schema({'kind': ['a', 'b']}))), name='tag_v2', progress=False)
        r = tag_table(t, OpenAICaptioner(url, tag_spec('tiny', tag_schema({'shot': ['near', 'far']}))), name='tag', progress=False)
        again = tag_table(t, OpenAICaptioner(url, tag_spec('tiny', tag_schema({'mood': ['calm', 'busy']}))), name='tag', replace=True, progress=False)
    finally: srv.shutdown()
    cols = lance.dataset(t).schema.names
    assert r.statuses == {'ok': r.rows} and again.columns == ['tag_mood']
    assert {'tag_v2_kind', 'tag_v2_status', 'tag_mood', 'tag_status'} <= set(cols) and 'tag_shot' not in cols
