"The MDS tree end to end: the console script, the stock reader, and a killed write resumed."
import json, signal, subprocess, time
from pathlib import Path
import pyarrow.parquet as pq
from streaming import StreamingDataset
from conftest import BIN
from prx_nb.bucket import Bucketer
from prx_nb.demo import demo_sources
from prx_nb.ingest import ingest
from prx_nb.mds import plan_buckets


def tree_ids(out: Path) -> dict:
    "Bucket -> ids, read with the stock StreamingDataset, for every finished bucket under `out`."
    got = {}
    for idx in sorted(out.glob('*/*/index.json')):
        sd = StreamingDataset(local=str(idx.parent), batch_size=1, shuffle=False)
        got[f'{idx.parent.parent.name}/{idx.parent.name}'] = [sd[i]['id'] for i in range(len(sd))]
    return got


def test_killed_write_resumes_without_duplicates_or_loss(tmp_path, demo):
    t = tmp_path / 't.lance'; ingest(t, demo_sources(demo), progress=False)
    out = tmp_path / 'mds'
    cmd = [str(BIN / 'prx_write_mds'), '--table', str(t), '--out', str(out), '--quiet']
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not list(out.glob('*/*/bucket.json')): time.sleep(0.01)
    p.send_signal(signal.SIGKILL); p.wait()
    done_before = {str(b.parent.relative_to(out)) for b in out.glob('*/*/bucket.json')}
    plan = plan_buckets(str(t), Bucketer())
    assert 0 < len(done_before) < len(plan), f'the kill did not land mid-write ({len(done_before)} of {len(plan)} buckets)'
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert r.stdout.count('(already complete)') == len(done_before)
    got = tree_ids(out)
    assert sorted(got) == sorted(plan)
    for k, ids in plan.items():
        rejected = pq.read_table(out / k / 'rejected.parquet')['id'].to_pylist()
        assert sorted(got[k] + rejected) == ids, k  # every planned row is a sample or a recorded rejection, once
    assert not list(out.glob('*/*.partial'))


def test_cli_help_and_errors(tmp_path, demo):
    r = subprocess.run([str(BIN / 'prx_write_mds'), '--help'], capture_output=True, text=True)
    assert r.returncode == 0 and '--caption_column' in r.stdout
    t = tmp_path / 't.lance'; ingest(t, [f'folder:{demo}/studio'], progress=False)
    r = subprocess.run([str(BIN / 'prx_write_mds'), '--table', str(t), '--out', str(tmp_path / 'o'), '--caption-column', 'caption_x'],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "caption columns there: ['caption_source']" in r.stderr and 'Traceback' not in r.stderr
    r = subprocess.run([str(BIN / 'prx_write_mds'), '--table', str(t), '--out', str(tmp_path / 'o'), '--where', "source = 'studio'", '--shard-mb', '1'],
                       capture_output=True, text=True, check=True)
    meta = [json.loads(p.read_text()) for p in (tmp_path / 'o').glob('*/*/bucket.json')]
    assert sum(m['samples'] for m in meta) == sum(len(v) for v in tree_ids(tmp_path / 'o').values()) > 0
    assert any(len(list(p.parent.glob('shard.*.mds'))) > 1 for p in (tmp_path / 'o').glob('4096/*/index.json'))  # 1 MB shards split big buckets
