"""Ingest of each source layout vs a plain copy of the same bytes into Lance, one core, same run.

The plain copy is what a user writes by hand for one layout (pyarrow reads, `lance.write_dataset`): no header probe,
no key planning, no captions rule, no status. prx_nb's ingest adds the header probe of every image, the key plan
(a pre-pass over the key, path and caption columns; for keys that repeat, a hash of the images), the caption rules and
one commit per `commit_rows`. Goal: ingest within 2x of the plain copy on every layout.
Usage: python bench/bench_sources.py [--n N] [--repeat R]
"""
import io, json, tarfile, tempfile, time
from pathlib import Path
import lance, pyarrow as pa, pyarrow.parquet as pq
from PIL import Image
from common import timed, record, parser
from prx_nb.demo import gather_photos
from prx_nb.ingest import ingest
from prx_nb.sources import parse_source, plan_source

HF_IMAGE = pa.struct([('bytes', pa.binary()), ('path', pa.string())])


def images(n):
    "n distinct JPEGs of 256-512 px cut from the real photos"
    photos = [Image.open(p).convert('RGB') for p in sorted(gather_photos().glob('*.jpg'))[:12]]
    out = []
    for i in range(n):
        im = photos[i % len(photos)]; s = 256 + (i * 37) % 256
        x, y = (i * 53) % max(1, im.width - s), (i * 29) % max(1, im.height - s)
        b = io.BytesIO(); im.crop((x, y, x + s, y + s)).save(b, 'JPEG', quality=90); out.append(b.getvalue())
    return out


def write_layouts(root, data):
    caps = [f'caption {i}' for i in range(len(data))]
    (root / 'files').mkdir()
    for i, b in enumerate(data): (root / 'files' / f'{i:06d}.jpg').write_bytes(b); (root / 'files' / f'{i:06d}.txt').write_text(caps[i])
    paths = [str(root / 'files' / f'{i:06d}.jpg') for i in range(len(data))]
    emb = pa.array([dict(bytes=b, path=f'{i:06d}.jpg') for i, b in enumerate(data)], HF_IMAGE)
    pq.write_table(pa.table({'image': emb, 'text': caps}), root / 'embedded.parquet', row_group_size=1000)
    pq.write_table(pa.table({'image': pa.array([dict(bytes=None, path=p) for p in paths], HF_IMAGE), 'text': caps}),
                   root / 'by_path.parquet')
    k = 5  # COCO-style: every image on five caption rows
    coco = pa.table({'image': pa.array([dict(bytes=b, path=f'{i:06d}.jpg') for i, b in enumerate(data) for _ in range(k)], HF_IMAGE),
                     'caption': [f'{c} / {j}' for c in caps for j in range(k)]})
    pq.write_table(coco, root / 'coco.parquet', row_group_size=1000)
    (root / 'wds').mkdir()
    for s in range(0, len(data), 1000):
        with tarfile.open(root / 'wds' / f'{s // 1000:05d}.tar', 'w') as tf:
            for i in range(s, min(s + 1000, len(data))):
                for ext, b in (('.jpg', data[i]), ('.txt', caps[i].encode())):
                    ti = tarfile.TarInfo(f'{i:09d}{ext}'); ti.size = len(b); tf.addfile(ti, io.BytesIO(b))


def copy_parquet(src, out, by_path=False):
    t = pq.read_table(src)
    img = t['image'].combine_chunks()
    data = pa.array([open(p, 'rb').read() for p in img.field('path').to_pylist()], pa.large_binary()) if by_path \
        else img.field('bytes').cast(pa.large_binary())
    lance.write_dataset(pa.table({'key': img.field('path'), 'image': data, 'caption': t.column(t.column_names[1])}), out, mode='overwrite')


def copy_tars(folder, out):
    keys, data, caps = [], [], []
    for p in sorted(folder.glob('*.tar')):
        with tarfile.open(p) as tf:
            for m in tf:
                b = tf.extractfile(m).read(); k, ext = m.name.split('.', 1)
                if ext == 'jpg': keys.append(k); data.append(b)
                else: caps.append(b.decode())
    lance.write_dataset(pa.table({'key': keys, 'image': pa.array(data, pa.large_binary()), 'caption': caps}), out, mode='overwrite')


def copy_folder(folder, out):
    ps = sorted(folder.glob('*.jpg'))
    lance.write_dataset(pa.table({'key': [p.name for p in ps], 'image': pa.array([p.read_bytes() for p in ps], pa.large_binary()),
                                  'caption': [p.with_suffix('.txt').read_text() for p in ps]}), out, mode='overwrite')


def main(n=2000, repeat=3):
    res = {}
    with tempfile.TemporaryDirectory() as d:
        root = Path(d); write_layouts(root, images(n))
        cases = [('folder_with_sidecars', f'folder:{root}/files', lambda o: copy_folder(root / 'files', o)),
                 ('hf_parquet_embedded', f'parquet:{root}/embedded.parquet', lambda o: copy_parquet(root / 'embedded.parquet', o)),
                 ('hf_parquet_by_path', f'parquet:{root}/by_path.parquet', lambda o: copy_parquet(root / 'by_path.parquet', o, True)),
                 ('coco_5_captions_per_image', f'parquet:{root}/coco.parquet', None),
                 ('webdataset_tars', f'wds:{root}/wds', lambda o: copy_tars(root / 'wds', o))]
        for name, spec, copy in cases:
            run = [0]
            def ours():
                run[0] += 1; ingest(root / f'{name}{run[0]}.lance', [f'src={spec}'], progress=False)
            t_ours, _ = timed(ours, repeat)
            t_plan, _ = timed(lambda: plan_source(parse_source(spec)), repeat)
            rows = lance.dataset(str(root / f'{name}1.lance')).count_rows()
            r = dict(images=rows, prx_nb_s=round(t_ours, 3), prx_nb_images_per_s=round(rows / t_ours),
                     plan_s=round(t_plan, 3), plan_share=round(t_plan / t_ours, 3))
            if copy:
                t_copy, _ = timed(lambda: copy(str(root / f'{name}_copy.lance')), repeat)
                r.update(plain_copy_s=round(t_copy, 3), ratio=round(t_ours / t_copy, 2), goal_met=t_ours / t_copy <= 2)
                print(f'{name}: prx_nb ingest {t_ours:.2f}s ({rows} rows; key plan {t_plan:.2f}s) vs plain copy {t_copy:.2f}s -> {t_ours / t_copy:.2f}x')
            else: print(f'{name}: prx_nb ingest {t_ours:.2f}s ({rows} rows from {rows * 5} caption rows; key plan with image hashes {t_plan:.2f}s)')
            res[name] = r
    res['goal'] = 'prx_nb ingest <= 2x the plain copy on every layout'
    res['goal_met'] = all(v.get('goal_met', True) for v in res.values() if isinstance(v, dict))
    record('sources', n=n, repeat=repeat, **res)


if __name__ == '__main__':
    ap = parser(__doc__)
    ap.add_argument('--n', type=int, default=2000, help='images per layout')
    ap.add_argument('--repeat', type=int, default=3, help='timed repetitions (median is reported)')
    main(**vars(ap.parse_args()))
