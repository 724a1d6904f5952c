"""The opt-out ledger under a race: W writer processes add ids to one table's ledger (`<table>.optouts.parquet`, as
`prx_optout` does: under the lock, a temporary file, `os.replace`) while R reader processes read it without a lock (as
every loader and verb does), for S seconds. Counted: reads, torn reads through prx_nb's reader (`read_ledger`: the
file's bytes from one open), torn reads through pyarrow given the path (`pq.read_table(path)`, what prx_nb did before:
it opens the file again for the row groups, so a rename in between tears the read), failed writes, and ids lost.
Goal: 0 torn reads through prx_nb's reader, 0 failed writes, 0 lost ids.
Usage: python bench/race_ledger.py [--seconds S] [--writers W] [--readers R]
"""
import multiprocessing as mp, tempfile, time
from pathlib import Path
import pyarrow.parquet as pq
from common import record, parser


def writer(table, n, stop, q):
    from prx_nb.skips import _add_to_ledger
    done, failed, k = [], 0, 0
    while time.time() < stop:
        ids = [f'w{n}-{k}-{j}' for j in range(1 + k % 50)]; k += 1
        try: _add_to_ledger(table, ids); done += ids
        except Exception: failed += 1
    q.put(('w', done, failed))


def reader(table, stop, q):
    from prx_nb.tree import read_ledger, ledger_path
    p = ledger_path(table)
    reads = torn = stock_reads = stock_torn = 0
    while time.time() < stop:
        try: read_ledger(table); reads += 1
        except ValueError: torn += 1
        try: pq.read_table(p, columns=['id']); stock_reads += 1
        except Exception: stock_torn += 1
    q.put(('r', reads, torn, stock_reads, stock_torn))


def main(seconds=600, writers=4, readers=2):
    d = Path(tempfile.mkdtemp())
    table = str(d / 't.lance')
    from prx_nb.skips import _add_to_ledger
    _add_to_ledger(table, ['seed'])
    stop, q = time.time() + seconds, mp.Queue()
    ps = [mp.Process(target=writer, args=(table, n, stop, q)) for n in range(writers)]
    ps += [mp.Process(target=reader, args=(table, stop, q)) for _ in range(readers)]
    for p in ps: p.start()
    got = [q.get() for _ in ps]
    for p in ps: p.join()
    from prx_nb.tree import read_ledger
    final = read_ledger(table)
    acked = {i for g in got if g[0] == 'w' for i in g[1]}
    res = dict(seconds=seconds, writers=writers, readers=readers,
               writes_acknowledged=len(acked), writes_failed=sum(g[2] for g in got if g[0] == 'w'),
               ids_lost=len(acked - final), ledger_ids=len(final),
               reads=sum(g[1] for g in got if g[0] == 'r'), torn_reads=sum(g[2] for g in got if g[0] == 'r'),
               path_reads=sum(g[3] for g in got if g[0] == 'r'), path_torn_reads=sum(g[4] for g in got if g[0] == 'r'))
    res['goal_met'] = res['torn_reads'] == 0 and res['writes_failed'] == 0 and res['ids_lost'] == 0
    print(f"{seconds} s, {writers} writers, {readers} readers: {res['reads']:,} reads, {res['torn_reads']} torn "
          f"(pyarrow given the path: {res['path_torn_reads']} torn of {res['path_reads'] + res['path_torn_reads']:,}); "
          f"{res['writes_acknowledged']:,} ids acknowledged, {res['writes_failed']} writes failed, {res['ids_lost']} lost")
    record('race_ledger', **res)


if __name__ == '__main__':
    ap = parser(__doc__)
    ap.add_argument('--seconds', type=float, default=600)
    ap.add_argument('--writers', type=int, default=4)
    ap.add_argument('--readers', type=int, default=2)
    a = ap.parse_args()
    main(seconds=a.seconds, writers=a.writers, readers=a.readers)
