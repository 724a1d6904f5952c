"Ingest end to end: idempotence, appends, kill-and-resume, the Ray path, the console scripts."
import signal, subprocess, time
import lance, pytest
from conftest import BIN
from prx_nb.core import Engine
from prx_nb.testing import tiny_image
from prx_nb.demo import demo_sources, DemoTruth
from prx_nb.ingest import ingest


def ids(table): return lance.dataset(str(table)).to_table(columns=['id'])['id'].to_pylist()


def test_demo_ingest_matches_truth_and_is_idempotent(tmp_path, demo):
    t = tmp_path / 't.lance'
    s = ingest(t, demo_sources(demo), embeddings=str(demo / 'embeddings.parquet'), progress=False)
    truth = DemoTruth.load(demo / 'truth.json')
    st = dict(zip(ids(t), lance.dataset(str(t)).to_table(columns=['status'])['status'].to_pylist()))
    assert all(st[i] == want for i, want in truth.broken.items())
    assert all(st[i] == 'ok' for g in truth.duplicates for i in g)
    v = lance.dataset(str(t)).version
    again = ingest(t, demo_sources(demo), embeddings=str(demo / 'embeddings.parquet'), progress=False)
    assert again.n_added == 0 and again.already_present == s.n_added and again.embeddings.written == 0
    assert lance.dataset(str(t)).version == v  # nothing committed at all
    assert len(ids(t)) == len(set(ids(t))) == s.n_added


def many_images(folder, n):
    folder.mkdir(); data = tiny_image(400, 300, 'PNG')
    for i in range(n): (folder / f'{i:04d}.png').write_bytes(data)
    return folder


def test_killed_ingest_resumes_without_loss_or_duplicates(tmp_path):
    n = 2000; src = many_images(tmp_path / 'imgs', n); t = tmp_path / 't.lance'
    cmd = [str(BIN / 'prx_ingest'), f'folder:{src}', '--table', str(t), '--commit-rows', '20', '--quiet']
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:  # wait for at least one commit, then kill mid-run
        ds = None
        try: ds = lance.dataset(str(t))
        except Exception: pass
        if ds is not None and 0 < ds.count_rows(): break
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL); p.wait()
    partial = len(ids(t))
    assert 0 < partial < n, f'the kill did not land mid-run ({partial} rows)'
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    final = ids(t)
    assert sorted(final) == sorted(f'imgs/{i:04d}.png' for i in range(n))
    assert len(final) == len(set(final))
    assert f'+{n - partial:,} rows, {partial:,} already present' in out


def test_new_source_appends_and_keeps_stage_columns(tmp_path, demo):
    t = tmp_path / 't.lance'
    ingest(t, [f'folder:{demo}/studio'], embeddings=None, progress=False)
    n = len(ids(t))
    extra = many_images(tmp_path / 'extra', 3)
    s = ingest(t, [f'folder:{demo}/studio', f'folder:{extra}'], progress=False)
    assert s.n_added == 3 and s.already_present == n and len(ids(t)) == n + 3


@pytest.mark.slow
def test_ray_path_gives_the_same_table(tmp_path, demo):
    a, b = tmp_path / 'a.lance', tmp_path / 'b.lance'
    emb = str(demo / 'embeddings.parquet')
    ingest(a, demo_sources(demo), embeddings=emb, progress=False)
    sb = ingest(b, demo_sources(demo), embeddings=emb, engine=Engine('ray', workers=2))
    ta, tb = (lance.dataset(str(x)).to_table().sort_by('id') for x in (a, b))
    assert ta.equals(tb)
    assert sb.n_added == ta.num_rows
    # appending through Ray skips what is there and adds only the new source
    extra = many_images(tmp_path / 'extra', 5)
    s2 = ingest(b, demo_sources(demo) + [f'folder:{extra}'], engine=Engine('ray', workers=2))
    assert s2.n_added == 5 and len(set(ids(b))) == len(ids(b)) == ta.num_rows + 5


@pytest.mark.parametrize('script', ['prx_ingest', 'prx_compact', 'prx_profile', 'prx_photos', 'prx_demo_sources', 'prx_demo', 'prx_write_mds', 'prx_skip', 'prx_optout', 'prx_skip_stats', 'prx_rewrite'])
def test_console_scripts_have_help(script):
    r = subprocess.run([str(BIN / script), '--help'], capture_output=True, text=True)
    assert r.returncode == 0 and 'usage:' in r.stdout and len(r.stdout.splitlines()) > 3


def test_cli_ingest_profile_compact(tmp_path, demo):
    t = tmp_path / 't.lance'
    r = subprocess.run([str(BIN / 'prx_ingest'), *demo_sources(demo), '--table', str(t), '--commit-rows', '10', '--quiet'],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert 'total' in r.stdout and 'hf_photos' in r.stdout and 'prx_compact' in r.stderr  # 10-row commits: too many fragments
    r = subprocess.run([str(BIN / 'prx_compact'), '--table', str(t)], capture_output=True, text=True, check=True)
    assert r.stdout.strip().endswith('-> 1')
    r = subprocess.run([str(BIN / 'prx_profile'), '--table', str(t), '--out', str(tmp_path / 'p')], capture_output=True, text=True, check=True)
    assert (tmp_path / 'p' / 'resolution.png').stat().st_size > 10_000 and 'tier_512' in r.stdout


def test_cli_errors_say_what_to_do(tmp_path):
    r = subprocess.run([str(BIN / 'prx_ingest'), 'zip:/nowhere'], capture_output=True, text=True)
    assert r.returncode != 0 and '--table is required' in r.stderr
    r = subprocess.run([str(BIN / 'prx_ingest'), 'zip:/nowhere', '--table', str(tmp_path / 't.lance')], capture_output=True, text=True)
    assert r.returncode != 0 and 'KIND one of' in r.stderr and 'Traceback' not in r.stderr
