"Dedup end to end: the console script on a demo tree, the Ray path of the phash column, and a killed fingerprint run resumed."
import json, signal, subprocess, sys, time
import lance
import pyarrow.parquet as pq
from conftest import BIN
from prx_nb.core import Engine
from prx_nb.demo import demo_sources, DemoTruth
from prx_nb.ingest import ingest
from prx_nb.phash import add_phash
from prx_nb.mds import write_mds
from prx_nb.tree import read_skips


def test_cli_dedups_a_tree_and_explains_errors(tmp_path, demo):
    t = str(tmp_path / 't.lance'); ingest(t, demo_sources(demo), progress=False)
    write_mds(t, tmp_path / 'mds', progress=False)  # no fingerprints in the table yet: the manifests have none
    r = subprocess.run([str(BIN / 'prx_dedup'), '--mds', str(tmp_path / 'mds'), '--table', t, '--quiet'], capture_output=True, text=True, check=True)
    assert 'skipped as dedup' in r.stdout and 'per tier:' in r.stdout
    skipped = set()
    for man in (tmp_path / 'mds').glob('*/*/manifest.parquet'):
        sk = read_skips(man.parent, ['dedup'])
        skipped |= {m['id'] for m in pq.read_table(man).to_pylist() if m['index'] in sk.get(m['shard'], ())}
    truth = DemoTruth.load(demo / 'truth.json')
    in_tree = {m['id'] for man in (tmp_path / 'mds').glob('*/*/manifest.parquet') for m in pq.read_table(man, columns=['id']).to_pylist()}
    groups = [[i for i in g if i in in_tree] for g in truth.duplicates]
    assert skipped <= {i for g in groups for i in g}  # only members of planted groups, never a distinct photo
    assert all(len(set(g) - skipped) == 1 for g in groups if g)  # one kept per group (which one: the pipeline test checks)
    assert len(skipped) == sum(len(g) - 1 for g in groups if g) > 0 and f'{len(skipped)} of' in r.stdout
    assert lance.dataset(t).count_rows("status = 'ok' AND phash IS NULL") == 0  # --table filled the table's fingerprints
    h = subprocess.run([str(BIN / 'prx_dedup'), '--help'], capture_output=True, text=True)
    assert h.returncode == 0 and '--radius' in h.stdout and '--table' in h.stdout
    e = subprocess.run([str(BIN / 'prx_dedup'), '--mds', str(tmp_path / 'nothing')], capture_output=True, text=True)
    assert e.returncode != 0 and 'no MDS buckets' in e.stderr and 'Traceback' not in e.stderr


def test_phash_ray_matches_local(tmp_path, demo):
    a, b = str(tmp_path / 'a.lance'), str(tmp_path / 'b.lance')
    for t in (a, b): ingest(t, demo_sources(demo), rows_per_fragment=20, progress=False)
    la, rb = add_phash(a, progress=False), add_phash(b, engine=Engine('ray', workers=2), progress=False)
    assert la.filled == rb.filled > 0 and rb.fragments > 1
    ta, tb = (lance.dataset(t).to_table(columns=['id', 'phash']).sort_by('id') for t in (a, b))
    assert ta.equals(tb)


def test_killed_fingerprint_run_resumes(tmp_path, demo):
    t = str(tmp_path / 't.lance'); ingest(t, demo_sources(demo), rows_per_fragment=10, progress=False)
    v0 = lance.dataset(t).version
    code = f'from prx_nb.phash import add_phash; add_phash({t!r}, progress=False)'
    p = subprocess.Popen([sys.executable, '-c', code])
    deadline = time.time() + 120
    while time.time() < deadline and lance.dataset(t).version < v0 + 3: time.sleep(0.05)  # the column added, then at least two fragments committed
    p.send_signal(signal.SIGKILL); p.wait()
    ds = lance.dataset(t)
    done, total = ds.count_rows("status = 'ok' AND phash IS NOT NULL"), ds.count_rows("status = 'ok'")
    assert 0 < done < total, f'the kill did not land mid-run ({done} of {total})'
    r = add_phash(t, progress=False)
    assert r.filled == total - done  # only what was missing
    assert lance.dataset(t).count_rows("status = 'ok' AND phash IS NULL") == 0
