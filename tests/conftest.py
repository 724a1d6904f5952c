import os, sys
from pathlib import Path
import pytest

os.environ.setdefault('RAY_AUTH_MODE', 'disabled')
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
