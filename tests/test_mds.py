"The MDS tree end to end: the console script, the stock reader, and a killed write resumed."
import json, shutil, signal, subprocess, time
from pathlib import Path
import pyarrow.parquet as pq
from conftest import BIN
from prx_nb.core import Engine
from prx_nb.bucket import Bucketer
from prx_nb.demo import demo_sources
from prx_nb.ingest import ingest
from prx_nb.mds import plan_buckets, iter_bucket


def tree_ids(out: Path, stock: bool = False) -> dict:
    "Bucket -> ids of every finished bucket under `out`; `stock`: read with streaming.StreamingDataset, in a fresh process."
    if stock:  # a StreamingDataset keeps ~100 /dev/shm handles until its process ends: give it its own
        code = ('import json, sys; from pathlib import Path; from streaming import StreamingDataset\n'
                'out = {}\n'
                'for idx in sorted(Path(sys.argv[1]).glob("*/*/index.json")):\n'
                '    sd = StreamingDataset(local=str(idx.parent), batch_size=1, shuffle=False)\n'
                '    out[f"{idx.parent.parent.name}/{idx.parent.name}"] = [sd[i]["id"] for i in range(len(sd))]\n'
                'print(json.dumps(out))')
        return json.loads(subprocess.run([str(BIN / 'python'), '-c', code, str(out)], capture_output=True, text=True, check=True).stdout)
    return {f'{i.parent.parent.name}/{i.parent.name}': [s['id'] for s in iter_bucket(i.parent)] for i in sorted(out.glob('*/*/index.json'))}


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
    got = tree_ids(out, stock=True)
    assert sorted(got) == sorted(plan)
    for k, rows in plan.items():
        rejected = pq.read_table(out / k / 'rejected.parquet')['id'].to_pylist()
        assert sorted(got[k] + rejected) == rows['id'].to_pylist(), k  # every planned row is a sample or a recorded rejection, once
    assert not list(out.glob('*/*.partial'))


def test_cli_help_and_errors(tmp_path, demo):
    r = subprocess.run([str(BIN / 'prx_write_mds'), '--help'], capture_output=True, text=True)
    assert r.returncode == 0 and '--caption-column' in r.stdout
    t = tmp_path / 't.lance'; ingest(t, [f'folder:{demo}/studio'], progress=False)
    r = subprocess.run([str(BIN / 'prx_write_mds'), '--table', str(t), '--out', str(tmp_path / 'o'), '--caption-column', 'caption_x'],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "caption columns there: ['caption_source']" in r.stderr and 'Traceback' not in r.stderr
    r = subprocess.run([str(BIN / 'prx_write_mds'), '--table', str(t), '--out', str(tmp_path / 'o'), '--where', "source = 'studio'", '--shard-mb', '1'],
                       capture_output=True, text=True, check=True)
    meta = [json.loads(p.read_text()) for p in (tmp_path / 'o').glob('*/*/bucket.json')]
    assert sum(m['samples'] for m in meta) == sum(len(v) for v in tree_ids(tmp_path / 'o').values()) > 0
    assert any(len(list(p.parent.glob('shard.*.mds'))) > 1 for p in (tmp_path / 'o').glob('4096/*/index.json'))  # 1 MB shards split big buckets


def test_cli_skip_optout_stats_rewrite(tmp_path, demo):
    t = tmp_path / 't.lance'; ingest(t, demo_sources(demo), progress=False)
    out, new = tmp_path / 'mds', tmp_path / 'mds2'
    subprocess.run([str(BIN / 'prx_write_mds'), '--table', str(t), '--out', str(out), '--quiet'], check=True, capture_output=True)
    before = tree_ids(out)
    k = max(before, key=lambda k: len(before[k]))
    text_ids, opt_ids = before[k][:4], before[k][4:5]
    (tmp_path / 'text.txt').write_text('\n'.join(text_ids + ['not/in/tree']))
    (tmp_path / 'opt.txt').write_text('\n'.join(opt_ids))
    r = subprocess.run([str(BIN / 'prx_skip'), '--mds', str(out), '--reason', 'text', '--ids', str(tmp_path / 'text.txt')], capture_output=True, text=True, check=True)
    assert '4 samples skipped' in r.stdout and '1 ids not in the tree' in r.stdout
    subprocess.run([str(BIN / 'prx_optout'), '--mds', str(out), '--ids', str(tmp_path / 'opt.txt')], check=True, capture_output=True)
    r = subprocess.run([str(BIN / 'prx_skip_stats'), '--mds', str(out)], capture_output=True, text=True, check=True)
    assert 'prx_rewrite' in r.stdout and k in r.stdout  # 5 of the biggest bucket's samples: over 10%
    assert tree_ids(out) == before  # shards untouched
    subprocess.run([str(BIN / 'prx_rewrite'), '--mds', str(out), '--out', str(new), '--quiet'], check=True, capture_output=True)
    after = tree_ids(new)
    assert after[k] == [i for i in before[k] if i not in text_ids + opt_ids]
    assert {b: v for b, v in after.items() if b != k} == {b: v for b, v in before.items() if b != k}
    # a fresh write of the same table into the rewritten tree keeps the opt-out
    shutil.rmtree(new / k)
    subprocess.run([str(BIN / 'prx_write_mds'), '--table', str(t), '--out', str(new), '--quiet'], check=True, capture_output=True)
    assert opt_ids[0] not in tree_ids(new)[k] and text_ids[0] in tree_ids(new)[k]


def test_ray_write_matches_local(tmp_path, demo):
    "Parts of several buckets written by Ray Data workers, merged per bucket: the same samples, bytes and manifests as one process."
    from prx_nb.mds import write_mds
    t = tmp_path / 't.lance'; ingest(t, demo_sources(demo), progress=False)
    local = write_mds(str(t), tmp_path / 'local', progress=False)
    ray = write_mds(str(t), tmp_path / 'ray', part_rows=3, engine=Engine('ray', workers=2), progress=False)
    assert sorted(ray.buckets) == sorted(local.buckets) and ray.written == local.written > 0
    for k in local.buckets:
        a, b = list(iter_bucket(tmp_path / 'local' / k)), list(iter_bucket(tmp_path / 'ray' / k))
        assert [s['id'] for s in b] == [s['id'] for s in a], k
        assert [s['image'] for s in b] == [s['image'] for s in a], k
        ma, mb = (pq.read_table(tmp_path / d / k / 'manifest.parquet') for d in ('local', 'ray'))
        assert mb.drop_columns(['shard', 'index']).equals(ma.drop_columns(['shard', 'index']))
        assert pq.read_table(tmp_path / 'ray' / k / 'rejected.parquet').equals(pq.read_table(tmp_path / 'local' / k / 'rejected.parquet'))
    metas = [json.loads(p.read_text()) for p in (tmp_path / 'ray').glob('*/*/bucket.json')]
    assert len({w for m in metas for w in m['writers']}) >= 2  # parts came from more than one worker process
    assert max(m['parts'] for m in metas) > 1  # and at least one bucket was merged from several parts
    assert tree_ids(tmp_path / 'ray', stock=True) == tree_ids(tmp_path / 'local')
    assert not [p for p in (tmp_path / 'ray').glob('*/*') if p.name.endswith(('.partial', '.parts'))]
    again = write_mds(str(t), tmp_path / 'ray', part_rows=3, engine=Engine('ray', workers=2), progress=False)
    assert all(b.skipped_complete for b in again.buckets.values())
