"""Write the layouts Hugging Face `datasets` and `webdataset` produce, with those libraries themselves.

Run by the producers' own environment (tests/.producers/hf: datasets 5.2, webdataset 1.0; their pins clash with
prx_nb's transformers): `python hf_layouts.py OUT PHOTO...`. Writes under OUT one folder per layout and
OUT/layouts.json: for each layout, the source spec to ingest (relative to OUT) and the images and captions it holds,
so the test can check that every image arrives once with its caption."""
import io, json, os, sys
from pathlib import Path
os.environ.setdefault('HF_DATASETS_OFFLINE', '1'); os.environ.setdefault('HF_HUB_OFFLINE', '1')
import datasets, webdataset as wds
from datasets import Dataset, DatasetDict, Features, Image, Value, load_dataset
from datasets.table import embed_table_storage
from PIL import Image as PILImage

out, photos = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
out.mkdir(parents=True, exist_ok=True)
datasets.disable_progress_bars()
layouts = {}


def small(i, size=(64, 48)):
    "Photo i as a small JPEG (distinct bytes per i)"
    im = PILImage.open(photos[i % len(photos)]).convert('RGB'); im.thumbnail((size[0] + i, size[1] + i))
    b = io.BytesIO(); im.save(b, 'JPEG', quality=90); return b.getvalue()


def files(folder, n, start=0, ext='.jpg'):
    folder.mkdir(parents=True, exist_ok=True)
    ps = []
    for i in range(start, start + n):
        p = folder / f'photo{i}{ext}'; p.write_bytes(small(i)); ps.append(p)
    return ps


def embedded(ds):
    "What push_to_hub stores: the images' bytes embedded, `path` reduced to the file's basename"
    return ds.with_format('arrow').map(embed_table_storage, batched=True).with_format(None)


# 1. images stored by path: absolute, relative to the Parquet file, and PIL images opened from files
d = out / 'hf_paths'; ps = files(d / 'imgs', 4)
caps = [f'a photo number {i}' for i in range(4)]
Dataset.from_dict({'image': [str(p) for p in ps], 'text': caps}).cast_column('image', Image()).to_parquet(str(d / 'abs.parquet'))
layouts['hf_paths_abs'] = dict(spec='parquet:hf_paths/abs.parquet', n=4, captions=caps)
cwd = os.getcwd(); os.chdir(d)  # relative paths: datasets resolves them from the working folder, the Parquet's own here
Dataset.from_dict({'image': [f'imgs/{p.name}' for p in ps], 'text': caps}).cast_column('image', Image()).to_parquet('rel.parquet')
os.chdir(cwd)
layouts['hf_paths_rel'] = dict(spec='parquet:hf_paths/rel.parquet', n=4, captions=caps)
pil = Dataset.from_dict({'image': [PILImage.open(p) for p in ps], 'caption': caps}, features=Features(image=Image(), caption=Value('string')))
pil.to_parquet(str(d / 'pil.parquet'))
layouts['hf_pil_from_files'] = dict(spec='parquet:hf_paths/pil.parquet', n=4, captions=caps)

# 2. an imagefolder dataset (class subfolders, same file names) embedded as push_to_hub does
src = out / 'imagefolder_src'
for j, cls in enumerate(['cat', 'dog']):
    (src / 'train' / cls).mkdir(parents=True, exist_ok=True)
    for i in range(4): (src / 'train' / cls / f'{i}.jpg').write_bytes(small(10 + 4 * j + i))
ds = load_dataset('imagefolder', data_dir=str(src), split='train')
d = out / 'hf_imagefolder' / 'data'; d.mkdir(parents=True)
embedded(ds).to_parquet(str(d / 'train-00000-of-00001.parquet'))
layouts['hf_imagefolder_embedded'] = dict(spec='parquet:hf_imagefolder', n=8, captions=None)

# 3. imagefolder with metadata.jsonl / metadata.csv (file_name + text), read as a folder
d = out / 'meta_jsonl'; ps = files(d / 'train', 3, 20)
(d / 'train' / 'metadata.jsonl').write_text(''.join(json.dumps({'file_name': p.name, 'text': f'jsonl caption {k}'}) + '\n' for k, p in enumerate(ps)))
assert load_dataset('imagefolder', data_dir=str(d), split='train')[0]['text'] == 'jsonl caption 0'  # datasets reads it so
layouts['folder_metadata_jsonl'] = dict(spec='folder:meta_jsonl', n=3, captions=[f'jsonl caption {k}' for k in range(3)])
d = out / 'meta_csv'; ps = files(d, 3, 23)
(d / 'metadata.csv').write_text('file_name,text\n' + ''.join(f'{p.name},"csv caption, {k}"\n' for k, p in enumerate(ps)))
assert load_dataset('imagefolder', data_dir=str(d), split='train')[0]['text'] == 'csv caption, 0'
layouts['folder_metadata_csv'] = dict(spec='folder:meta_csv', n=3, captions=[f'csv caption, {k}' for k in range(3)])

# 4. WebDataset shards (webdataset's ShardWriter, brace-numbered) and load_dataset('webdataset') saved as Parquet
d = out / 'wds'; d.mkdir()
caps = [f'webdataset caption {i}' for i in range(7)]
with wds.ShardWriter(str(d / 'shard-%06d.tar'), maxcount=3, verbose=0) as sink:
    for i in range(7): sink.write({'__key__': f'sample{i:04d}', 'jpg': small(30 + i), 'txt': caps[i],
                                   'json': {'caption': caps[i], 'url': f'https://example.com/{i}.jpg'}})
(out / 'wds_json').mkdir()  # captions only in the .json member, as img2dataset-like crawls write them
with wds.TarWriter(str(out / 'wds_json' / '00000.tar')) as sink:
    for i in range(3): sink.write({'__key__': f'{i:09d}', 'jpg': small(60 + i), 'json': {'caption': f'json caption {i}'}})
layouts['wds_json_caption'] = dict(spec='wds:wds_json/00000.tar', n=3, captions=[f'json caption {i}' for i in range(3)])
layouts['wds_braces'] = dict(spec='wds:wds/shard-{000000..000002}.tar', n=7, captions=caps)
layouts['wds_folder'] = dict(spec='wds:wds', n=7, captions=caps)
hf_wds = load_dataset('webdataset', data_files={'train': sorted(str(p) for p in d.glob('*.tar'))}, split='train')
(out / 'hf_wds').mkdir()
hf_wds.to_parquet(str(out / 'hf_wds' / 'train.parquet'))
layouts['hf_webdataset_parquet'] = dict(spec='parquet:hf_wds/train.parquet', n=7, captions=caps,
                                        columns=sorted(hf_wds.column_names))

# 5. save_to_disk: a Dataset and a DatasetDict (Arrow files, state.json)
caps = [f'saved caption {i}' for i in range(5)]
one = Dataset.from_dict({'image': [{'bytes': small(40 + i), 'path': None} for i in range(5)], 'caption': caps},
                        features=Features(image=Image(), caption=Value('string')))
one.save_to_disk(str(out / 'saved'))
layouts['hf_save_to_disk'] = dict(spec='hf:saved', n=5, captions=caps)
DatasetDict(train=one.select(range(3)), test=one.select(range(3, 5))).save_to_disk(str(out / 'saved_dict'))
layouts['hf_save_to_disk_dict'] = dict(spec='hf:saved_dict', n=5, captions=caps)

# 6. COCO-style: one image, several caption rows (stored by path and embedded)
d = out / 'coco'; ps = files(d / 'images', 3, 50)
rows = [(p, f'coco caption {k}.{c}') for k, p in enumerate(ps) for c in range(3)]
coco = Dataset.from_dict({'image': [str(p) for p, _ in rows], 'image_id': [int(p.stem[5:]) for p, _ in rows],
                          'caption': [c for _, c in rows]}).cast_column('image', Image())
coco.to_parquet(str(d / 'by_path.parquet'))
embedded(coco).to_parquet(str(d / 'embedded.parquet'))
layouts['coco_by_path'] = dict(spec='parquet:coco/by_path.parquet', n=3, captions=[c for _, c in rows], per_image=3)
layouts['coco_embedded'] = dict(spec='parquet:coco/embedded.parquet', n=3, captions=[c for _, c in rows], per_image=3)

(out / 'layouts.json').write_text(json.dumps(layouts, indent=1))
print(json.dumps({k: v['spec'] for k, v in layouts.items()}))
