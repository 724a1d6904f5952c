"Shared helpers for the benchmarks: timing and recording results as JSON in bench/results/."
import argparse, json, os, platform, statistics, sys, time
from pathlib import Path

RESULTS = Path(__file__).parent / 'results'


def timed(fn, repeat=5):
    "Median and all wall-clock seconds of `repeat` calls of `fn`."
    ts = []
    for _ in range(repeat):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts), ts


def machine():
    from importlib.metadata import PackageNotFoundError, version
    def v(dist):
        try: return version(dist)
        except PackageNotFoundError: return None
    return dict(python=sys.version.split()[0], cpus=os.cpu_count(), platform=platform.platform(),
                pylance=v('pylance'), pyarrow=v('pyarrow'))


def record(name, **figures):
    "Write `figures` (plus the machine) to bench/results/`name`.json and print them."
    RESULTS.mkdir(exist_ok=True)
    out = dict(benchmark=name, date=time.strftime('%Y-%m-%d'), machine=machine(), **figures)
    (RESULTS / f'{name}.json').write_text(json.dumps(out, indent=1) + '\n')
    print(json.dumps(figures, indent=1))
    return out


def parser(doc):
    "An ArgumentParser whose help is the benchmark's docstring."
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
