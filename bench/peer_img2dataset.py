"""Peer side of bench_bucket.py, run by the peer environment's Python (bench/.peer, img2dataset 1.47).

Reads a JSON job {"files": [[path, short_side], ...], "repeat": R} on stdin and prints the median seconds for
img2dataset's Resizer (keep_ratio to the given short side, Lanczos both ways, JPEG quality 92, one OpenCV thread)
over all files, and the median seconds of a plain cv2.imdecode of the same files."""
import io, json, statistics, sys, time
import cv2, numpy as np
from img2dataset.resizer import Resizer

job = json.load(sys.stdin)
cv2.setNumThreads(1)
resizers = {s: Resizer(image_size=s, resize_mode='keep_ratio', resize_only_if_bigger=False, upscale_interpolation='lanczos',
                       downscale_interpolation='lanczos', encode_quality=92, encode_format='jpg') for _, s in job['files']}
data = [(open(p, 'rb').read(), s) for p, s in job['files']]


def resize_all():
    for b, s in data:
        out = resizers[s](io.BytesIO(b))
        if out[-1] is not None: raise RuntimeError(out[-1])


def decode_all():
    for b, _ in data: cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_UNCHANGED)


def med(fn):
    ts = []
    for _ in range(job['repeat']):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts)


print(json.dumps(dict(resize_s=med(resize_all), decode_s=med(decode_all))))
