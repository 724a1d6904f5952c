"""A synthetic corpus of N images for the scale benchmarks, made from crops and rescales of the real photos.

Sizes are log-uniform over 0.1-16 MP, aspect ratios over 1:3-3:1, JPEG quality 75-95. A known share is planted:
broken files (empty, truncated, not an image), duplicates (byte copies and re-encoded rescales of an earlier
image, in another source) and rendered text images. The images are spread over the four source shapes the
demo uses: an image folder with sidecar captions, Hugging Face-style Parquet (image bytes), WebDataset tars and
a metadata-only table of file locations. `truth.json` records what was planted.

Usage: python bench/make_corpus.py N OUT [--seed S] [--workers W]
"""
import io, json, math, tarfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from PIL import Image
from common import parser

SHAPES = ('folder', 'parquet', 'wds', 'meta')
_PHOTOS = {}


def photos():
    "The cached real photos, decoded once per process (reduced to at most 16 MP)."
    if not _PHOTOS:
        from prx_nb.demo import gather_photos
        root = gather_photos()
        for r in json.loads((root / 'photos.json').read_text()):
            if r['kind'] != 'photo': continue
            im = Image.open(root / r['file']).convert('RGB')
            if im.width * im.height > 16e6: im.thumbnail((4096, 4096))
            _PHOTOS[r['file']] = im
    return _PHOTOS


def make_image(seed:int)->tuple:
    "(JPEG bytes, caption) of a random crop of a random photo, rescaled to a random size and aspect ratio."
    rng = np.random.default_rng(seed)
    ims = photos()
    name = sorted(ims)[rng.integers(len(ims))]
    im = ims[name]
    ar = math.exp(rng.uniform(math.log(1 / 3), math.log(3)))
    cw = min(im.width, int(im.height * ar)); ch = min(im.height, int(cw / ar))
    x, y = rng.integers(0, im.width - cw + 1), rng.integers(0, im.height - ch + 1)
    mp = math.exp(rng.uniform(math.log(0.1e6), math.log(16e6)))
    w = max(16, int(math.sqrt(mp * ar))); h = max(16, int(w / ar))
    out = im.crop((x, y, x + cw, y + ch)).resize((w, h), Image.BILINEAR)
    buf = io.BytesIO(); out.save(buf, 'JPEG', quality=int(rng.integers(75, 96)))
    return buf.getvalue(), f'a crop of {Path(name).stem.replace("_", " ")}, {w}x{h}'


def make_text(seed:int)->tuple:
    from prx_nb.demo import render_text_image
    kind = ('slide', 'document', 'screenshot', 'chart')[seed % 4]
    buf = io.BytesIO(); render_text_image(kind, seed).save(buf, 'JPEG', quality=90)
    return buf.getvalue(), f'a {kind} with text'


def broken(seed:int, good:bytes)->bytes:
    return (b'', good[:len(good) // 3], b'<html>404 Not Found</html>')[seed % 3]


def plan(n:int, seed:int)->list:
    "One entry per image: (index, shape, kind, argument); kinds: image, text, broken, copy, reencode."
    rng = np.random.default_rng(seed)
    kinds = rng.choice(['image', 'text', 'broken', 'copy', 'reencode'], n, p=[0.91, 0.03, 0.02, 0.02, 0.02])
    out = []
    for i, k in enumerate(kinds):
        if k in ('copy', 'reencode') and i < 10: k = 'image'
        arg = int(rng.integers(0, i)) if k in ('copy', 'reencode') else seed * 10_000_019 + i
        out.append((i, SHAPES[i % 4], str(k), arg))
    return out


def render(entry:tuple, seed:int)->tuple:
    "(index, bytes, caption) for one plan entry."
    i, shape, kind, arg = entry
    if kind == 'text': data, cap = make_text(arg)
    elif kind in ('copy', 'reencode'):
        data, cap = make_image(seed * 10_000_019 + arg)
        if kind == 'reencode':
            im = Image.open(io.BytesIO(data)); im = im.resize((max(16, im.width * 3 // 4), max(16, im.height * 3 // 4)), Image.LANCZOS)
            buf = io.BytesIO(); im.save(buf, 'JPEG', quality=85); data = buf.getvalue()
    else:
        data, cap = make_image(arg)
        if kind == 'broken': data = broken(arg, data)
    return i, data, cap


def write(n:int, out:Path, seed:int=0, workers:int=2):
    "Make the corpus in `out`: folder/, parquet/, wds/, meta/ (+ files/ the metadata table points at), truth.json."
    out = Path(out).resolve()  # the metadata table records absolute locations: it is read from anywhere
    for s in SHAPES: (out / s).mkdir(parents=True, exist_ok=True)
    (out / 'files').mkdir(exist_ok=True)
    entries = plan(n, seed)
    rows = {s: [] for s in SHAPES}
    with ProcessPoolExecutor(workers) as ex:
        for i, data, cap in ex.map(render, entries, [seed] * n, chunksize=16):
            shape, key = entries[i][1], f'img{i:08d}'
            if shape == 'folder':
                (out / 'folder' / f'{key}.jpg').write_bytes(data); (out / 'folder' / f'{key}.txt').write_text(cap)
            elif shape == 'meta':
                (out / 'files' / f'{key}.jpg').write_bytes(data); rows['meta'].append(dict(key=key, uri=str(out / 'files' / f'{key}.jpg'), caption=cap))
            else: rows[shape].append((key, data, cap))
            if len(rows['parquet']) >= 500: _flush_parquet(out, rows)
            if len(rows['wds']) >= 500: _flush_wds(out, rows)
    _flush_parquet(out, rows); _flush_wds(out, rows)
    pq.write_table(pa.Table.from_pylist(rows['meta']), out / 'meta' / 'catalog.parquet')
    ident = lambda e: {'folder': f'folder/img{e[0]:08d}.jpg', 'meta': f'meta/img{e[0]:08d}'}.get(e[1], f'{e[1]}/img{e[0]:08d}')
    truth = dict(n=n, seed=seed, kinds={k: sum(e[2] == k for e in entries) for k in ('image', 'text', 'broken', 'copy', 'reencode')},
                 broken=[ident(e) for e in entries if e[2] == 'broken'], text=[ident(e) for e in entries if e[2] == 'text'],
                 copies=[[ident(entries[e[3]]), ident(e)] for e in entries if e[2] in ('copy', 'reencode')])
    (out / 'truth.json').write_text(json.dumps(truth))
    return truth


def _flush_parquet(out, rows):
    if not rows['parquet']: return
    k = len(list((out / 'parquet').glob('*.parquet')))
    t = pa.table({'key': [r[0] for r in rows['parquet']], 'image': pa.array([dict(bytes=r[1], path=f'{r[0]}.jpg') for r in rows['parquet']]),
                  'text': [r[2] for r in rows['parquet']]})
    pq.write_table(t, out / 'parquet' / f'train-{k:05d}.parquet'); rows['parquet'].clear()


def _flush_wds(out, rows):
    if not rows['wds']: return
    k = len(list((out / 'wds').glob('*.tar')))
    with tarfile.open(out / 'wds' / f'shard-{k:06d}.tar', 'w') as tf:
        for key, data, cap in rows['wds']:
            for ext, b in (('jpg', data), ('txt', cap.encode())):
                info = tarfile.TarInfo(f'{key}.{ext}'); info.size = len(b); tf.addfile(info, io.BytesIO(b))
    rows['wds'].clear()


def sources(out:Path)->list:
    "The source specs of a corpus made by `write`."
    out = Path(out)
    return [f'folder=folder:{out}/folder', f'parquet=parquet:{out}/parquet', f'wds=wds:{out}/wds', f'meta=meta:{out}/meta/catalog.parquet']


if __name__ == '__main__':
    p = parser(__doc__)
    p.add_argument('n', type=int); p.add_argument('out'); p.add_argument('--seed', type=int, default=0); p.add_argument('--workers', type=int, default=2)
    a = p.parse_args()
    print(json.dumps(write(a.n, Path(a.out), a.seed, a.workers)['kinds']))
