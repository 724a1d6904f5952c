"""One rank of a multi-rank run of `prx_nb.loader.tree_dataset`, started the way torchrun starts ranks (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE set, torch.distributed initialised); tests/test_tree_loader.py runs several at once.
argv[1]: JSON with root, bs, workers, kw (tree_dataset keywords), out, and optionally stop (batches), state, resume."""
import json, os, sys
import torch.distributed as dist
from streaming import StreamingDataLoader
from prx_nb.loader import tree_dataset

cfg = json.loads(sys.argv[1])
rank, world = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
dist.init_process_group('gloo', init_method=cfg['init'], rank=rank, world_size=world)
if cfg.get('folders'):  # the mixin over a class of the trainer's own: stock StreamingDataset, or one with its own constructor
    from streaming import Stream, StreamingDataset
    from prx_nb.loader import with_skips
    class Trainers(StreamingDataset):
        def __init__(self, folders, bs, seed):
            super().__init__(streams=[Stream(local=f) for f in folders], batch_size=bs, shuffle=True, shuffle_seed=seed,
                             batching_method='device_per_stream')
    ds = with_skips(Trainers, **cfg.get('skips', {}))(cfg['folders'], cfg['bs'], cfg.get('seed', 0))
else: ds = tree_dataset(cfg['root'], batch_size=cfg['bs'], **cfg.get('kw', {}))
dl = StreamingDataLoader(ds, batch_size=cfg['bs'], num_workers=cfg['workers'],
                         collate_fn=lambda xs: {'id': [x['id'] for x in xs], 'wh': [[x['width'], x['height']] for x in xs]})
if cfg.get('resume'): dl.load_state_dict(json.loads(open(cfg['resume']).read()))
out = []
for b in dl:
    out.append([[i, w, h] for i, (w, h) in zip(b['id'], b['wh'])])
    if cfg.get('stop') and len(out) == cfg['stop']:
        if rank == 0: open(cfg['state'], 'w').write(json.dumps(dl.state_dict()))
        break
open(cfg['out'], 'w').write(json.dumps(dict(batches=out, len=len(dl))))
dist.barrier()
dist.destroy_process_group()
