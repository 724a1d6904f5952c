"""What decoding each source image once for both pixel stages of a run would save: the fingerprint (a DCT-reduced
luma decode to >= 512 px, then 32x32) and the bucket (a DCT-reduced decode to >= 2x the cover size, Lanczos, q92).

- separate: `phash(data)` then `Bucketer()(data)`, as `prx_run` runs them (two decodes)
- decode once: the bucket's decode (`open_rgb` with the bucket's draft, YCbCr), the fingerprint's 32x32 luma taken
  from that decoded Y plane (INTER_AREA, as `luma_thumbnail` does), then the bucket's resize and encode from the
  same pixels. This path is assembled here from prx_nb's parts to measure it; prx_nb does not run it.
- floor: the bucket stage alone (the fingerprint for free).

Images: the JPEGs of a synthetic corpus (`make_corpus.py`; 0.1-16 MP, aspect 1:3-3:1).
Usage: python bench/bench_decode_once.py [--images 300] [--corpus DIR]
"""
import math, time
from pathlib import Path
import numpy as np
from common import record, parser


def fused(data:bytes, bk, fingerprints, cv2):
    "(fingerprint, JPEG) from one decode, or (None, None) outside the buckets."
    from PIL import Image
    from prx_nb.core import probe_image, open_rgb
    from prx_nb.bucket import cover_size, center_crop_box, YCbCrPlanes, _encode
    info = probe_image(data, bk.max_pixels)
    tier, b, _ = bk.assign(info.width, info.height)
    if not tier: return None, None
    cw, ch = cover_size(info.width, info.height, *b)
    im = open_rgb(data, draft=(math.ceil(cw * bk.oversample), math.ceil(ch * bk.oversample)), info=info, ycc=True)
    y, cb, cr = im.split()
    thumb = cv2.resize(np.asarray(y), (32, 32), interpolation=cv2.INTER_AREA).astype(np.float32)
    fp = int(fingerprints(thumb[None])[0])
    sx, sy = im.width / cw, im.height / ch
    l, t, r, btm = center_crop_box(cw, ch, *b)
    box = (l * sx, t * sy, r * sx, btm * sy)
    half, hbox = ((b[0] + 1) // 2, (b[1] + 1) // 2), tuple(v / 2 for v in box)
    p = YCbCrPlanes(y.resize(b, Image.LANCZOS, box=box), *(c.reduce(2).resize(half, Image.LANCZOS, box=hbox) for c in (cb, cr)))
    return fp, _encode(p, bk.quality)


def main(n:int, corpus:Path):
    import cv2
    from prx_nb.bucket import Bucketer
    from prx_nb.phash import phash, fingerprints
    if not (corpus / 'truth.json').exists():
        from make_corpus import write
        write(max(n, 300), corpus)
    files = sorted((corpus / 'folder').glob('*.jpg'))[:n]
    datas = [f.read_bytes() for f in files]
    bk = Bucketer()
    kept = [d for d in datas if bk(d).ok]  # images that reach a bucket: where both stages run
    def separate():
        for d in kept: phash(d); bk(d)
    def once():
        for d in kept: fused(d, bk, fingerprints, cv2)
    def bucket_only():
        for d in kept: bk(d)
    def phash_only():
        for d in kept: phash(d)
    same_jpeg = sum(fused(d, bk, fingerprints, cv2)[1] == bk(d).jpeg for d in kept)
    fp_equal = sum(fused(d, bk, fingerprints, cv2)[0] == phash(d)[0] for d in kept)
    separate()  # warm the page cache and the libraries once
    t = {}
    for name, fn in [('separate', separate), ('decode_once', once), ('bucket_only', bucket_only), ('phash_only', phash_only)]:
        s = time.perf_counter(); fn(); t[name] = (time.perf_counter() - s) / len(kept) * 1000
    return record('decode_once', images=len(kept), ms_per_image={k: round(v, 2) for k, v in t.items()},
                  saving_ms=round(t['separate'] - t['decode_once'], 2),
                  saving_share=round(1 - t['decode_once'] / t['separate'], 3),
                  decode_once_over_floor=round(t['decode_once'] / t['bucket_only'], 3),
                  same_jpeg_bytes=same_jpeg, same_fingerprint=fp_equal)


if __name__ == '__main__':
    p = parser(__doc__)
    p.add_argument('--images', type=int, default=300)
    p.add_argument('--corpus', default='bench_out/scale/corpus_10000')
    a = p.parse_args()
    main(a.images, Path(a.corpus))
