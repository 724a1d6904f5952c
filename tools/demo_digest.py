"""Digest of a demo run, to show that a change keeps the demo's outputs byte for byte:
`python tools/demo_digest.py OUT DIGEST.json` writes the sha1 of every file of OUT/mds (JSON files with their times,
writer pids and the run folder taken out, since those differ between any two runs) and of every column of the Lance
table's rows (sorted by id, the run folder taken out). Compare two runs with
`python tools/demo_digest.py --compare A.json B.json`."""
import hashlib, json, sys
from pathlib import Path
import lance, pyarrow as pa
if sys.argv[1] == '--compare':
    a, b = (json.load(open(p)) for p in sys.argv[2:4])
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    print(f'{len(a)} and {len(b)} entries; differing: {differ or "none"}')
    sys.exit(1 if differ else 0)
out = Path(sys.argv[1]).resolve(); res = {}
VOLATILE = {'updated_at', 'written_at', 'writers', 'made_at', 'finished_at'}
def norm(o):
    if isinstance(o, dict): return {k: norm(v) for k, v in o.items() if k not in VOLATILE}
    if isinstance(o, list): return [norm(v) for v in o]
    if isinstance(o, str): return o.replace(str(out), '<OUT>')
    return o
for f in sorted((out / 'mds').rglob('*')):
    if not f.is_file(): continue
    data = f.read_bytes()
    if f.suffix == '.json': data = json.dumps(norm(json.loads(data)), sort_keys=True).encode()
    res['mds/' + str(f.relative_to(out / 'mds'))] = hashlib.sha1(data).hexdigest()
t = lance.dataset(str(out / 'corpus.lance')).to_table()
t = t.take(pa.compute.sort_indices(t['id']))
for c in t.column_names:
    res['table:' + c] = hashlib.sha1(str(t[c].to_pylist()).replace(str(out), '<OUT>').encode()).hexdigest()
json.dump(res, open(sys.argv[2], 'w'), indent=1, sort_keys=True)
print(len(res), 'entries')
