"`prx_run CONFIG` end to end: killed with SIGKILL at random moments and rerun, it ends exactly where an uninterrupted run ends; an unwritable output is one clear error, and what finished stays intact."
import json, os, random, signal, subprocess, time
import lance, pyarrow.parquet as pq, pytest
from conftest import BIN
from prx_nb.pipeline import config_text
from prx_nb.tree import iter_buckets, bucket_key, read_skips


def config(tmp_path, demo, name, **sections):
    "A run of the demo sources (no search indices: faster) into tmp_path/name; its TOML file."
    from prx_nb.demo import demo_sources
    c = dict(run=dict(out=str(tmp_path / name)), ingest=dict(sources=demo_sources(demo), embeddings=str(demo / 'embeddings.parquet')),
             classify=dict(caption_column='caption_source'), mds=dict(part_rows=8)) | sections
    p = tmp_path / f'{name}.toml'
    p.write_text(config_text(c))
    return p


def prx_run(cfg, **kw):
    return subprocess.Popen([str(BIN / 'prx_run'), str(cfg), '--quiet'], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def state(out):
    "Everything a run leaves that a trainer or a later stage reads: the table's rows, every bucket's samples and skip lists."
    t = lance.dataset(str(out / 'corpus.lance'))
    cols = [c for c in ('id', 'status', 'width', 'height', 'phash', 'label_kind', 'label_kind_status') if c in t.schema.names]
    rows = t.to_table(columns=cols).sort_by('id').to_pylist()
    tree = {}
    for b in iter_buckets(out / 'mds'):
        man = pq.read_table(b / 'manifest.parquet', columns=['id', 'shard', 'index']).to_pylist()
        shards = {s['raw_data']['basename']: s['raw_data']['hashes'] for s in json.loads((b / 'index.json').read_text())['shards']}
        skips = {r: {sh: sorted(ix) for sh, ix in read_skips(b, [r]).items()} for r in ('dedup', 'text', 'nsfw', 'optout')}
        tree[bucket_key(b)] = (man, shards, skips)
    return rows, tree


def unreferenced(table):
    "Files in the table's data/ folder that no version names: what killed writes leave."
    named = {f.path for v in lance.dataset(str(table)).versions()
             for fr in lance.dataset(str(table), version=v['version']).get_fragments() for f in fr.data_files()}
    return sorted(p.name for p in (table / 'data').iterdir() if p.name not in named)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_rerun_equals_an_uninterrupted_run(tmp_path, demo):
    ref = config(tmp_path, demo, 'ref')
    t0 = time.time()
    r = prx_run(ref); out, err = r.communicate(timeout=900)
    assert r.returncode == 0, err[-3000:]
    took = time.time() - t0
    killed = config(tmp_path, demo, 'killed')
    seed = random.randrange(1 << 30)
    rng, kills = random.Random(seed), 0
    for frac in (0.15, 0.35, 0.55, 0.8):
        p = prx_run(killed)
        time.sleep(took * frac * rng.uniform(0.7, 1.3))
        if p.poll() is None: p.send_signal(signal.SIGKILL); kills += 1
        p.wait()
    assert kills >= 2, f'the run finished before it could be killed (seed {seed})'
    p = prx_run(killed); out, err = p.communicate(timeout=900)
    assert p.returncode == 0, f'seed {seed}: {err[-3000:]}'
    a, b = state(tmp_path / 'ref'), state(tmp_path / 'killed')
    assert a[0] == b[0], f'seed {seed}: the Lance tables differ'
    assert a[1].keys() == b[1].keys(), f'seed {seed}: the trees hold different buckets'
    for k in a[1]: assert a[1][k] == b[1][k], f'seed {seed}: bucket {k} differs'
    assert sum(len(s) for _, _, sk in a[1].values() for s in sk['dedup'].values()) >= 5
    summary = json.loads((tmp_path / 'killed' / 'summary.json').read_text())
    assert [s['status'] for s in summary['stages']][-1] in ('off', 'ran', 'skipped')
    assert unreferenced(tmp_path / 'killed' / 'corpus.lance') == [], f'seed {seed}: files of killed writes were left'


def test_unwritable_output_is_one_clear_error(tmp_path, demo):
    (tmp_path / 'a_file').write_text('not a folder')  # a folder under a file: no user can create it, root included
    cfg = config(tmp_path, demo, 'blocked', run=dict(out=str(tmp_path / 'a_file' / 'out')))
    r = subprocess.run([str(BIN / 'prx_run'), str(cfg), '--quiet'], capture_output=True, text=True)
    assert r.returncode != 0 and 'Traceback' not in r.stderr, r.stderr[-2000:]
    assert 'prx_run: cannot write' in r.stderr and str(tmp_path / 'a_file') in r.stderr, r.stderr


def du(p):
    return sum(f.stat().st_size for f in p.rglob('*') if f.is_file())


@pytest.mark.slow
def test_full_disk_is_one_clear_error_and_a_rerun_with_space_finishes(tmp_path, demo):
    mnt = tmp_path / 'small'; mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', str(mnt)], capture_output=True).returncode:
        pytest.skip('needs root to mount a small tmpfs (a disk that fills up)')
    try:
        ref = config(tmp_path, demo, 'ref')
        assert subprocess.run([str(BIN / 'prx_run'), str(ref), '--quiet'], capture_output=True).returncode == 0
        need = du(tmp_path / 'ref')
        subprocess.run(['mount', '-o', f'remount,size={int(need * 0.6)}', str(mnt)], check=True)
        full = config(mnt, demo, 'out')
        r = subprocess.run([str(BIN / 'prx_run'), str(full), '--quiet'], capture_output=True, text=True)
        assert r.returncode != 0 and 'Traceback' not in r.stderr, r.stderr[-3000:]
        assert 'prx_run: ' in r.stderr and ('No space left' in r.stderr or 'space' in r.stderr) and str(mnt) in r.stderr, r.stderr[-2000:]
        out = mnt / 'out'
        if (out / 'corpus.lance').exists(): lance.dataset(str(out / 'corpus.lance')).count_rows()   # what was committed reads
        from prx_nb.tree import check_bucket
        if (out / 'mds').exists(): assert all(check_bucket(b) == [] for b in iter_buckets(out / 'mds'))  # finished buckets are sound
        subprocess.run(['mount', '-o', f'remount,size={int(need * 3)}', str(mnt)], check=True)
        r = subprocess.run([str(BIN / 'prx_run'), str(full), '--quiet'], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]
        a, b = state(tmp_path / 'ref'), state(out)
        assert a == b
    finally:
        subprocess.run(['umount', str(mnt)], capture_output=True)


def free_port():
    import socket
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


@pytest.mark.slow
def test_a_two_node_ray_cluster_runs_the_config_as_one_process_does(tmp_path, demo):
    "A real cluster: `ray start --head` and a second `ray start --address` node as separate processes; the run's table, tree and skip lists equal the single-process run's, and both nodes wrote parts."
    ray = str(BIN / 'ray')
    env = dict(os.environ, RAY_AUTH_MODE='disabled', RAY_USAGE_STATS_ENABLED='0')
    port = free_port()
    import ray as in_process
    if in_process.is_initialized(): in_process.shutdown()  # a local Ray an earlier test started here: stopped cleanly, not killed
    try:
        subprocess.run([ray, 'start', '--head', f'--port={port}', '--num-cpus=1', '--include-dashboard=false'], check=True, capture_output=True, env=env)
        subprocess.run([ray, 'start', f'--address=127.0.0.1:{port}', '--num-cpus=1'], check=True, capture_output=True, env=env)
        local = config(tmp_path, demo, 'local')
        cluster = config(tmp_path, demo, 'cluster', run=dict(out=str(tmp_path / 'cluster'), engine='ray', ray_address=f'127.0.0.1:{port}'))
        for cfg in (local, cluster):
            r = subprocess.run([str(BIN / 'prx_run'), str(cfg), '--quiet'], capture_output=True, text=True, env=env)
            assert r.returncode == 0, r.stderr[-3000:]
        nodes = set()
        for b in iter_buckets(tmp_path / 'cluster' / 'mds'):
            nodes |= {w.split(':node-')[1] for w in json.loads((b / 'bucket.json').read_text())['writers'] if ':node-' in w}
        assert len(nodes) == 2, nodes                                   # parts were written on both nodes
        a, b = state(tmp_path / 'local'), state(tmp_path / 'cluster')
        assert a[0] == b[0], 'the Lance tables differ'
        assert {k: (m, s) for k, (m, s, _) in a[1].items()} == {k: (m, s) for k, (m, s, _) in b[1].items()}, 'the trees differ'
        assert {k: sk for k, (_, _, sk) in a[1].items()} == {k: sk for k, (_, _, sk) in b[1].items()}, 'the skip lists differ'
    finally:
        subprocess.run([ray, 'stop', '--force'], capture_output=True, env=env)
