import os, sys
from pathlib import Path
import pytest

os.environ.setdefault('RAY_AUTH_MODE', 'disabled')


import prx_nb.loader  # noqa: F401  releases Mosaic's shared memory with its datasets, not at exit: one pytest process builds a thousand
BAD = Path(__file__).parent / 'data' / 'bad'
BIN = Path(sys.executable).parent


@pytest.fixture(scope='session')
def demo(tmp_path_factory):
    "The demo sources, built once per test session from the photo cache."
    from prx_nb.demo import build_demo
    root = tmp_path_factory.mktemp('demo') / 'sources'
    build_demo(root)
    return root


@pytest.fixture
def bad_dir():
    return BAD


@pytest.fixture
def s3(monkeypatch):
    "An S3 emulation (a moto server on a free local port, as Mosaic's own tests emulate object stores): an `upload(folder, bucket, prefix)`"
    import socket, boto3
    from moto.server import ThreadedMotoServer
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address='127.0.0.1', port=port); server.start()
    # moto keeps its buckets in process-global state, across servers: without a reset, a test's bucket still holds the
    # objects an earlier test uploaded under the same keys (another tree's skip lists and opt-out record)
    import requests
    requests.post(f'http://127.0.0.1:{port}/moto-api/reset', timeout=30).raise_for_status()
    for k, v in dict(S3_ENDPOINT_URL=f'http://127.0.0.1:{port}', AWS_ACCESS_KEY_ID='test', AWS_SECRET_ACCESS_KEY='test',
                     AWS_DEFAULT_REGION='us-east-1').items(): monkeypatch.setenv(k, v)
    client = boto3.client('s3', endpoint_url=f'http://127.0.0.1:{port}')

    def upload(folder, bucket, prefix):
        "Every file of `folder` (but dot files) to s3://bucket/prefix/…"
        client.create_bucket(Bucket=bucket)
        for f in Path(folder).rglob('*'):
            if f.is_file() and not f.name.startswith('.'): client.upload_file(str(f), bucket, f'{prefix}/{f.relative_to(folder).as_posix()}')
    try: yield upload
    finally: server.stop()


@pytest.fixture(scope='session')
def make_demo_tree(tmp_path_factory, demo):
    """`make_demo_tree(name)`: the demo sources ingested and written as an MDS tree of 1 MB shards, fresh each call
    (tests add their own skip lists); (root, the ids of each bucket by its key)."""
    def make(name:str):
        import pyarrow.parquet as pq
        from prx_nb.demo import demo_sources
        from prx_nb.ingest import ingest
        from prx_nb.mds import write_mds
        from prx_nb.tree import iter_buckets, bucket_key
        d = tmp_path_factory.mktemp(name)
        ingest(d / 't.lance', demo_sources(demo), progress=False)
        write_mds(str(d / 't.lance'), d / 'mds', shard_bytes=1 << 20, progress=False)
        root = d / 'mds'
        return root, {bucket_key(b): pq.read_table(b / 'manifest.parquet').column('id').to_pylist() for b in iter_buckets(root)}
    return make
