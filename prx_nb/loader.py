from __future__ import annotations
import json, logging, re, warnings
from pathlib import Path
import numpy as np
from streaming import Stream
from .mds import iter_buckets, bucket_key
from .skips import SkipStreamingDataset, read_skips, optout_indices, fetch_tree_files, stream_optouts

def _remote_keys(root:str)->list:
    "Keys of the buckets of the remote tree `root` that hold samples (`bucket.json` and `index.json` both there)."
    import tempfile
    from urllib.parse import urlparse
    from streaming.base.storage import CloudUploader
    with tempfile.TemporaryDirectory() as tmp:
        keys = CloudUploader.get(out=(tmp, root), exist_ok=True).list_objects() or []
    base, have = urlparse(root).path.strip('/'), {}
    for k in keys:
        rel = k[len(base):].lstrip('/') if base and k.startswith(base) else k
        if m := re.fullmatch(r'(\d+/\d+x\d+)/(bucket\.json|index\.json)', rel): have.setdefault(m[1], set()).add(m[2])
    return [k for k, v in have.items() if len(v) == 2]

def tree_buckets(root:str|Path, # an MDS tree: a local folder, or a remote URI (s3://, gs://, …)
                )->list:
    "The keys `<tier>/<W>x<H>` of the tree's finished buckets that hold samples, sorted by tier, then name"
    root = str(root)
    if '://' in root and not root.startswith('file://'): keys = _remote_keys(root)
    else: keys = [bucket_key(b) for b in iter_buckets(root.removeprefix('file://'))]
    return sorted(keys, key=lambda k: (int(k.split('/')[0]), k))

def _counts(st:Stream, reasons, trees:dict)->tuple:
    "(samples, kept) of stream `st` (a bucket) under `reasons` and its tree's opt-outs; `trees` caches the opt-outs"
    local = Path(st.local) / (st.split or '')
    if (local / 'index.json').exists():
        n = sum(s['samples'] for s in json.loads((local / 'index.json').read_text())['shards'])
    else:
        import pyarrow.parquet as pq
        n = pq.ParquetFile(local / 'manifest.parquet').metadata.num_rows
    sk = read_skips(local, None if reasons is None else set(reasons) | {'optout'})
    for s, idx in optout_indices(local, stream_optouts(st, trees)).items(): sk.setdefault(s, set()).update(idx)
    return n, n - sum(map(len, sk.values()))

class TreeDataset(SkipStreamingDataset):
    "A `SkipStreamingDataset` over the buckets of a tree, one stream each, whose every batch holds samples of one bucket."
    def __init__(self,
                 *,
                 keys:list, # the bucket key of each stream, in order
                 small:str='pad', # a bucket's last, short global batch: 'pad' it with repeats of its samples, or 'drop' it
                 transform=None, # called on each sample dict before it is yielded (e.g. `decode_sample`)
                 **kwargs, # everything `SkipStreamingDataset` takes (with `batching_method='per_stream'`)
                ):
        if small not in ('pad', 'drop'): raise ValueError(f"small must be 'pad' or 'drop', not {small!r}")
        if kwargs.get('batching_method', 'per_stream') != 'per_stream':
            raise ValueError("a TreeDataset batches per stream (one bucket per batch): leave out batching_method")
        self.keys, self.small, self.transform = list(keys), small, transform
        super().__init__(batching_method='per_stream', **kwargs)
        self.global_batch = self.batch_size * self._parallel_rank_world.num_ranks
        per = [len(self.resample_streams(0, i)[1]) for i in range(len(self.streams))]  # samples of each bucket per epoch
        self.samples_per_bucket = dict(zip(self.keys, per))
        self.length = sum(per) // self._parallel_rank_world.num_ranks

    def __len__(self)->int: return self.length

    def _get_work(self, epoch:int, sample_in_epoch:int)->np.ndarray:
        "The stock work of this worker; with `small='pad'`, without Mosaic's warning about short batches (padded: none is short)"
        quiet = self.small == 'pad'
        log = logging.getLogger('streaming.base.batching.per_stream')
        level = log.level
        if quiet: log.setLevel(logging.ERROR)
        try: return SkipStreamingDataset._get_work(self, epoch, sample_in_epoch)
        finally: log.setLevel(level)

    def resample_streams(self, epoch:int, stream_id:int|None=None)->tuple:
        "The stock resampling of a bucket (skipped samples out under `drop`), padded to whole global batches under `small='pad'`"
        units, ids = SkipStreamingDataset.resample_streams(self, epoch, stream_id)
        if stream_id is None or not len(ids): return units, ids
        g = self.batch_size * self._parallel_rank_world.num_ranks
        rng = np.random.default_rng([self.shuffle_seed, epoch, stream_id])  # the same on every rank and run
        if self.small == 'drop':  # whole global batches only, the remainder chosen at random (Mosaic's partitioner would
            if not (rem := len(ids) % g): return units, ids  # otherwise fill the short ranks with repeats)
            keep = np.ones(len(ids), bool); keep[rng.choice(len(ids), rem, replace=False)] = False
            n = np.add.reduceat(keep.astype(np.int64), np.concatenate([[0], np.cumsum(units)[:-1]]))
            return n[n > 0], ids[keep]
        if not (short := -len(ids) % g): return units, ids
        pad = np.concatenate([np.tile(ids, short // len(ids)), rng.choice(ids, short % len(ids), replace=False)])
        return np.append(units, short), np.concatenate([ids, np.sort(pad)])

    def get_item(self, sample_id:int, retry:int=7):
        x = SkipStreamingDataset.get_item(self, sample_id, retry)
        return self.transform(x) if self.transform else x

def _shares(keys:list, kept:dict, proportions:dict)->dict:
    "Bucket key → its share of the epoch, from `proportions` over tiers or bucket keys (each tier's share split by kept samples)"
    tier = lambda k: k.split('/')[0]
    names = {str(n) for n in proportions}
    if bad := names - {tier(k) for k in keys} - set(keys):
        raise ValueError(f'proportions names {sorted(bad)}, which the tree (after tiers=, buckets=) does not hold; '
                         f'its tiers: {sorted({tier(k) for k in keys}, key=int)}')
    by = {str(n): float(p) for n, p in proportions.items()}
    if any(p < 0 for p in by.values()) or not sum(by.values()): raise ValueError(f'proportions must be >= 0 and not all 0: {proportions}')
    if miss := [k for k in keys if k not in by and tier(k) not in by]:
        raise ValueError(f'proportions gives no share to {miss[:3]}{" …" if len(miss) > 3 else ""}: name every tier '
                         '(or bucket) read, or choose them with tiers=')
    out = {k: by[k] for k in keys if k in by}
    for t in {tier(k) for k in keys} & set(by):
        ks = [k for k in keys if tier(k) == t and k not in out]
        tot = sum(kept[k] for k in ks)
        out |= {k: by[t] * kept[k] / tot for k in ks}
    s = sum(out.values())
    return {k: v / s for k, v in out.items()}

def tree_dataset(root:str|Path, # an MDS tree: a local folder, or a remote URI (s3://…, gs://…) read through `local`
                 *,
                 batch_size:int, # samples per batch per device; every batch holds one bucket's samples
                 reasons=None, # skip-list reasons to apply (None: every one; opt-outs always apply)
                 tiers=None, # tiers to read, e.g. [512, 1024] (None: all)
                 buckets=None, # bucket keys 'tier/WxH' to read (None: all of `tiers`)
                 proportions:dict|None=None, # tier or bucket key → share of the epoch's samples (None: as the tree holds them)
                 seed:int=0, # shuffle, sampling and padding seed: the same seed, the same batches
                 on_skip:str='substitute', # a skipped sample: 'substitute' a kept one of its bucket, or 'drop' it from the epoch
                 small:str='pad', # a bucket's last short global batch: 'pad' (repeats of its samples) or 'drop' (Mosaic's way)
                 local:str|Path|None=None, # the cache folder for a remote tree (required with a remote `root`)
                 shuffle:bool=True, # shuffle the samples of each bucket, and the order of the batches
                 transform=None, # called on each sample before it is yielded (e.g. `decode_sample`)
                 **kwargs, # anything else `StreamingDataset` takes (epoch_size, shuffle_algo, predownload, …)
                )->TreeDataset:
    "One `StreamingDataset` over a whole MDS tree: a `Stream` per bucket, batches per stream, skip lists applied."
    root, remote = str(root), '://' in str(root) and not str(root).startswith('file://')
    if remote and local is None: raise ValueError(f'{root} is remote: give local= (a cache folder for its buckets)')
    keys = tree_buckets(root)
    if not keys: raise ValueError(f'{root}: no finished buckets (<tier>/<W>x<H> with bucket.json and index.json); '
                                  'write one with prx_write_mds, or check the path')
    if tiers is not None:
        want = {str(t) for t in tiers}
        if miss := want - {k.split('/')[0] for k in keys}: raise ValueError(f'{root} has no tier {sorted(miss)}')
        keys = [k for k in keys if k.split('/')[0] in want]
    if buckets is not None:
        if miss := set(buckets) - set(keys): raise ValueError(f'{root} has no bucket {sorted(miss)} (of the tiers asked for)')
        keys = [k for k in keys if k in set(buckets)]
    src = lambda k: (f'{root.rstrip("/")}/{k}', str(Path(local) / k)) if remote else (None, str(Path(root.removeprefix('file://')) / k))
    streams, trees, counts = {}, {}, {}
    for k in keys:
        r, l = src(k)
        st = Stream(remote=r, local=l)
        if r: fetch_tree_files(st)
        streams[k], counts[k] = st, _counts(st, reasons, trees)
    left = {k: f'every one of its {n} samples is skipped' for k, (n, kept) in counts.items() if not kept}
    g = batch_size * _ranks()
    if small == 'drop':
        n_of = lambda k: counts[k][1] if on_skip == 'drop' else counts[k][0]
        left |= {k: f'{n_of(k)} samples, fewer than one global batch ({g}) (small="drop")' for k in keys
                 if k not in left and n_of(k) < g}
    for k, why in left.items(): warnings.warn(f'{k} is left out of the tree dataset: {why}', stacklevel=2)
    keys = [k for k in keys if k not in left]
    if not keys: raise ValueError(f'{root}: no bucket left to stream ({len(left)} left out: {next(iter(left.values()))})')
    if proportions is not None:
        share = _shares(keys, {k: counts[k][1] for k in keys}, proportions)
        kwargs.setdefault('epoch_size', sum(counts[k][0] for k in keys))
        for k in keys: streams[k]._proportion = share[k]
        keys = [k for k in keys if share[k] > 0]
    ds = TreeDataset(keys=keys, small=small, transform=transform, streams=[streams[k] for k in keys],
                     batch_size=batch_size, reasons=reasons, on_skip=on_skip, shuffle=shuffle, shuffle_seed=seed, **kwargs)
    ds.left_out = left
    ds.caption_columns = _caption_columns(ds)
    return ds

def _ranks()->int:
    "The world size Mosaic will see: torch.distributed's when it runs, else the WORLD_SIZE variable."
    import os
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized(): return dist.get_world_size()
    except ImportError: pass
    return int(os.environ.get('WORLD_SIZE', 1))

def _caption_columns(ds)->dict:
    "Bucket key → the Lance column its `caption` field was written from (`bucket.json`)"
    out = {}
    for k, st in zip(ds.keys, ds.streams):
        p = Path(st.local) / (st.split or '') / 'bucket.json'
        out[k] = json.loads(p.read_text()).get('caption_column') if p.exists() else None
    if len(set(out.values())) > 1:
        warnings.warn(f'the buckets hold captions from different columns: {sorted(set(map(str, out.values())))}; '
                      'see .caption_columns', stacklevel=3)
    return out

def _decoder()->tuple:
    "torchvision's `decode_jpeg` and its RGB mode (imported quietly: 0.29 announces a future move to TorchCodec)"
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        from torchvision.io import decode_jpeg, ImageReadMode
    return decode_jpeg, ImageReadMode.RGB

def _tensor(data:bytes):
    import torch
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)

def decode_sample(sample:dict, # a sample as the tree's MDS holds it (`jpg` bytes, caption, width, height, id)
                 )->dict:
    "The sample with `image`, its JPEG decoded to a uint8 tensor (3, H, W), in place of the `jpg` bytes (a `transform=`)"
    decode_jpeg, RGB = _decoder()
    x = dict(sample)
    x['image'] = decode_jpeg(_tensor(x.pop('jpg')), mode=RGB)
    return x

def collate(samples:list, # the samples of one batch (decoded by `decode_sample`, or with their `jpg` bytes)
            device=None, # where to decode `jpg` bytes: None (CPU), or 'cuda' (torchvision's batched GPU decoder)
           )->dict:
    "One batch: `image` (B, 3, H, W) uint8, `caption` and `id` lists, `width` and `height` tensors; `ValueError` when sizes differ"
    import torch
    sizes = {(s['width'], s['height']) for s in samples}
    if len(sizes) > 1:
        raise ValueError(f'one image size per batch, got {sorted(sizes)} (ids {[s["id"] for s in samples][:4]}): '
                         'read a tree with `tree_dataset`, which batches one bucket at a time')
    if 'image' in samples[0]: image = torch.stack([s['image'] for s in samples])
    else:
        decode_jpeg, RGB = _decoder()
        data = [_tensor(s['jpg']) for s in samples]
        if device is None or str(device) == 'cpu': image = torch.stack([decode_jpeg(d, mode=RGB) for d in data])
        else: image = torch.stack(decode_jpeg(data, mode=RGB, device=device))  # one batched call on the GPU
    return dict(image=image, caption=[s['caption'] for s in samples], id=[s['id'] for s in samples],
                width=torch.tensor([s['width'] for s in samples]), height=torch.tensor([s['height'] for s in samples]))
