"""What verifying shard hashes costs: `tree_dataset` over a remote tree (an S3 emulation, moto's server on 127.0.0.1)
with the SHA-1 that index.json records checked as every shard is downloaded (the default for remote streams) vs not
checked (validate_hash=False), a fresh cache for every epoch, in one run, interleaved; and over the same tree on local
disk, the set-up time with validate_hash=True (every shard hashed once, in the main process) vs without. The floor is
SHA-1 itself: hashlib over the same shard bytes, one core.

Samples are real photos (the demo's photo cache) in 512-tier buckets, q92, 10% of each shard skipped (as
bench_tree_loader.py builds them), with the SHA-1 of each shard in index.json as prx_nb's writer records it.
Usage: python bench/bench_remote_hash.py [--per-bucket N] [--repeat R] [--workers W]
"""
import gc, hashlib, json, os, shutil, socket, tempfile, time, warnings
from pathlib import Path
import numpy as np
from torch.utils.data import DataLoader
from common import record, parser
from bench_tree_loader import make_tree, SIZES
from prx_nb.loader import tree_dataset


def add_hashes(root):
    "Record each shard's SHA-1 in its index.json (what MDSWriter(hashes=['sha1']) writes); the bytes hashed"
    n = 0
    for idx in root.glob('*/*/index.json'):
        j = json.loads(idx.read_text())
        for s in j['shards']:
            data = (idx.parent / s['raw_data']['basename']).read_bytes(); n += len(data)
            s['raw_data']['hashes'] = {'sha1': hashlib.sha1(data).hexdigest()}
        idx.write_text(json.dumps(j, sort_keys=True))
    return n


def s3_server():
    import boto3
    from moto.server import ThreadedMotoServer
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address='127.0.0.1', port=port); server.start()
    os.environ |= dict(S3_ENDPOINT_URL=f'http://127.0.0.1:{port}', AWS_ACCESS_KEY_ID='test', AWS_SECRET_ACCESS_KEY='test',
                       AWS_DEFAULT_REGION='us-east-1')
    return server, boto3.client('s3', endpoint_url=f'http://127.0.0.1:{port}')


def epoch(root, *, local, bs, workers, **kw):
    "samples/s of one epoch (set-up included: the shards are downloaded while it runs), bytes only"
    shutil.rmtree(local, ignore_errors=True)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        ds = tree_dataset(root, batch_size=bs, seed=1, local=local, **kw)
    n = sum(len(b) for b in DataLoader(ds, batch_size=bs, num_workers=workers, collate_fn=list))
    dt = time.perf_counter() - t
    del ds; gc.collect()
    return n / dt


def main(per_bucket=500, repeat=3, workers=2, bs=32):
    tmp = Path(tempfile.mkdtemp()); root = tmp / 'tree'
    server = None
    try:
        make_tree(root, per_bucket)
        nbytes = add_hashes(root)
        data = [p.read_bytes() for p in root.glob('*/*/shard.*.mds')]
        t = time.perf_counter()
        for d in data: hashlib.sha1(d).hexdigest()
        sha_mb_s = nbytes / 1e6 / (time.perf_counter() - t)
        del data
        n = per_bucket * len(SIZES)
        res = dict(samples=n, buckets=len(SIZES), shard_mb=round(nbytes / 1e6, 1), workers=workers, batch_size=bs,
                   sha1_floor_mb_per_s=round(sha_mb_s), sha1_floor_s=round(nbytes / 1e6 / sha_mb_s, 3))
        for name, kw in (('local_setup', {}), ('local_setup_validate', dict(validate_hash=True))):
            ts = []
            for _ in range(repeat):
                t = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter('ignore')
                    ds = tree_dataset(root, batch_size=bs, seed=1, **kw)
                ts.append(time.perf_counter() - t); del ds; gc.collect()
            res[f'{name}_s'] = round(float(np.median(ts)), 3)
        server, client = s3_server()
        client.create_bucket(Bucket='corpus')
        for f in root.rglob('*'):
            if f.is_file() and not f.name.startswith('.'): client.upload_file(str(f), 'corpus', f'tree/{f.relative_to(root).as_posix()}')
        on, off = [], []
        for _ in range(repeat):  # interleaved, so drift hits both
            on.append(epoch('s3://corpus/tree', local=str(tmp / 'cache'), bs=bs, workers=workers))
            off.append(epoch('s3://corpus/tree', local=str(tmp / 'cache'), bs=bs, workers=workers, validate_hash=False))
        a, b = float(np.median(off)), float(np.median(on))
        res |= dict(remote_unchecked_runs=[round(x) for x in off], remote_checked_runs=[round(x) for x in on],
                    remote_unchecked_samples_per_s=round(a), remote_checked_samples_per_s=round(b),
                    remote_hash_cost=round(1 - b / a, 4))
        print(f'remote epoch (S3 emulation, {workers} workers, fresh cache): unchecked {a:,.0f} samples/s vs SHA-1 checked '
              f'{b:,.0f} samples/s -> cost {1 - b / a:.1%} (ratio {b / a:.3f}); SHA-1 floor {sha_mb_s:,.0f} MB/s '
              f'({nbytes / 1e6 / sha_mb_s:.2f} s for the {nbytes / 1e6:,.0f} MB of shards)')
        print(f"local set-up: {res['local_setup_s']:.2f} s, with validate_hash=True {res['local_setup_validate_s']:.2f} s")
        record('remote_hash', **res)
    finally:
        if server is not None: server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    ap = parser(__doc__)
    ap.add_argument('--per-bucket', type=int, default=500)
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--workers', type=int, default=2)
    a = ap.parse_args()
    main(per_bucket=a.per_bucket, repeat=a.repeat, workers=a.workers)
