import os, sys
from pathlib import Path
import pytest

os.environ.setdefault('RAY_AUTH_MODE', 'disabled')


def _more_descriptors(want=1 << 18):
    "Mosaic keeps every StreamingDataset's shared memory open until the process exits (about 275 descriptors each, held by\n    atexit), and one pytest process builds a thousand datasets: raise the open-file limit where this user may"
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for lim in ((want, max(hard, want)), (hard, hard)):
        try: resource.setrlimit(resource.RLIMIT_NOFILE, lim); return
        except (ValueError, OSError): continue


_more_descriptors()
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
