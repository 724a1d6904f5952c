"""The whole CPU pipeline (`prx_run`) at growing corpus sizes, single process and on a local Ray: images/s per stage
and the peak memory of the run's process, per size. Goal (issue 17): time per image flat within +-20% from the
smallest to the largest size, and peak RSS that does not grow with N.

Each size gets a synthetic corpus (`bench/make_corpus.py`: crops and rescales of the real photos, 0.1-16 MP,
aspect 1:3-3:1, planted broken files, copies and text images, over the four source shapes), made once under --work.
Each run is `prx_run CONFIG` in its own process; its peak RSS is that process's (with Ray, the driver's: the
workers are Ray's processes), and each stage's own peak is the run's summary's (the run resets the peak as a stage starts).

Usage: python bench/bench_scale.py [--sizes 10000 30000 100000] [--engines local ray] [--work DIR]
"""
import json, resource, shutil, subprocess, sys, time
from pathlib import Path
from common import record, parser, RESULTS
from make_corpus import write, sources
from prx_nb.pipeline import config_text

BIN = Path(sys.executable).parent
PEAK = ('import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); '
        'print("PEAK_KB", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)')


def run(n:int, engine:str, work:Path)->dict:
    corpus = work / f'corpus_{n}'
    if not (corpus / 'truth.json').exists():
        t = time.perf_counter(); write(n, corpus); print(f'corpus of {n}: {time.perf_counter() - t:.0f} s', flush=True)
    out = work / f'run_{n}_{engine}'
    shutil.rmtree(out, ignore_errors=True)
    cfg = work / f'run_{n}_{engine}.toml'
    cfg.write_text(config_text(dict(run=dict(out=str(out), engine=engine, workers=2), ingest=dict(sources=sources(corpus)))))
    t = time.perf_counter()
    r = subprocess.run([sys.executable, '-c', PEAK, str(BIN / 'prx_run'), str(cfg), '--quiet'], capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode: raise SystemExit(f'prx_run failed at {n} ({engine}): {r.stderr[-2000:]}')
    peak = int(next(l.split()[1] for l in r.stdout.splitlines() if l.startswith('PEAK_KB')))
    s = json.loads((out / 'summary.json').read_text())
    stages = {x['name']: dict(seconds=round(x['seconds'], 2), rows_in=x['rows_in'], per_s=x['per_s'],
                               ms_per_image=round(1000 * x['seconds'] / n, 3), peak_rss_mb=x.get('peak_rss_mb'), peak_own=x.get('peak_own', False))
              for x in s['stages'] if x['status'] == 'ran'}
    # the run resets its peak as each stage starts (so that each stage's is its own), which the exit figure then only sees
    # since the last stage began: the run's peak is the larger of that and the stages' own
    peak = max(peak // 1024, s.get('peak_rss_mb') or 0)
    res = dict(images=n, engine=engine, wall_s=round(wall, 1), ms_per_image=round(1000 * wall / n, 2), peak_rss_mb=peak,
               samples=next(x['rows_out'] for x in s['stages'] if x['name'] == 'mds'), stages=stages)
    print(f"{n:>7} {engine:5}: {wall:7.0f} s, {res['ms_per_image']} ms/image, peak RSS {res['peak_rss_mb']} MB; "
          + ', '.join(f"{k} {v['per_s']}/s" for k, v in stages.items() if v['per_s']), flush=True)
    shutil.rmtree(out, ignore_errors=True)
    return res


def main(sizes, engines, work, keep=False, name='scale'):
    work.mkdir(parents=True, exist_ok=True)
    runs = [run(n, e, work) for n in sizes for e in engines]
    if keep and (old := RESULTS / f'{name}.json').exists():  # the other sizes' runs of the last record stay
        redone = {(r['images'], r['engine']) for r in runs}
        runs += [r for r in json.loads(old.read_text())['runs'] if (r['images'], r['engine']) not in redone]
        runs.sort(key=lambda r: (r['images'], r['engine']))
        sizes, engines = sorted({r['images'] for r in runs}), sorted({r['engine'] for r in runs})
    flat = {}
    for e in engines:
        per = [r['ms_per_image'] for r in runs if r['engine'] == e]
        mem = [r['peak_rss_mb'] for r in runs if r['engine'] == e]
        flat[e] = dict(ms_per_image_largest_over_smallest=round(per[-1] / per[0], 3), peak_rss_largest_over_smallest=round(mem[-1] / mem[0], 3),
                       time_goal_met=abs(per[-1] / per[0] - 1) <= 0.2 if len(per) > 1 else None)
    return record(name, sizes=sizes, engines=engines, runs=runs, flatness=flat)


if __name__ == '__main__':
    p = parser(__doc__)
    p.add_argument('--sizes', type=int, nargs='+', default=[10_000, 30_000, 100_000])
    p.add_argument('--engines', nargs='+', default=['local', 'ray'])
    p.add_argument('--work', default='bench_out/scale', help='corpora and runs (large: about 250 KB per image)')
    p.add_argument('--keep', action='store_true', help="keep the last record's runs of the sizes and engines not run now")
    p.add_argument('--record', default='scale', help='the record in bench/results/ (another name keeps the full-size record as it is)')
    a = p.parse_args()
    main(a.sizes, a.engines, Path(a.work), keep=a.keep, name=a.record)
