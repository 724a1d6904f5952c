"""Semantic dedup (concept clusters) at 100k rows: embedding rate of EfficientNet-lite0 on real photos (measured on a
sample, the 100k figure EXTRAPOLATED from it), then clustering + within-cluster pairing of 100,000 1280-d vectors and the
memory they hold (tracemalloc's peak over the step, in a second pass: the arrays numpy and scikit-learn allocate, beyond the
input), against the peer: brute-force all-pairs cosine on the same vectors (at --peer-n rows, 100k by default, in the same run),
with the pairs semdedup finds out of those the brute force finds.

The 100k vectors are built from real embeddings: the sample's EfficientNet-lite0 vectors (photos and their crops, colour
shifts, re-framings), each copied with Gaussian noise (cosine ~0.7 to its parent: one concept, not a duplicate), plus a
share of near copies (tiny noise, cosine ~0.99) as planted near duplicates. They are synthetic in that sense; say so.

Usage: python bench/bench_semdedup.py [--n 100000] [--sample 500] [--peer-n 100000] [--threshold 0.85]
"""
import json, resource, time, tracemalloc
import numpy as np
from common import record, parser
from prx_nb.demo import gather_photos
from prx_nb.embed import EfficientNetEmbedder
from prx_nb.semdedup import concept_set, concept_truth, cosine_pr, unit_rows, cluster_embeddings, semdedup_groups, cluster_pairs, default_k
from prx_nb.phash import phash_many, precision_recall


def embed_sample(n):
    "(unit vectors of about `n` real images, images/s on this machine)."
    photos = gather_photos()
    files = [photos / r['file'] for r in json.loads((photos / 'photos.json').read_text()) if r['kind'] == 'photo']
    items = concept_set(files[:max(1, -(-n // 14))])[:n]
    emb = EfficientNetEmbedder()
    t = time.perf_counter()
    e = emb([x['data'] for x in items])
    rate = len(items) / (time.perf_counter() - t)
    return unit_rows(e.vectors)[0][e.ok], rate


def grow(real, n, *, seed=0, copies=0.05, chunk=10_000):
    "`n` vectors from `real`: noisy children (one concept each) and a share of near copies of them (built in chunks: small temporaries)."
    rng = np.random.default_rng(seed)
    d = real.shape[1]
    out = np.empty((n, d), np.float32)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        out[a:b] = real[rng.integers(0, len(real), b - a)] + (0.9 / np.sqrt(d)) * rng.standard_normal((b - a, d), dtype=np.float32)
    dup = np.flatnonzero(rng.random(n) < copies)
    src = rng.integers(0, n, len(dup))
    for a in range(0, len(dup), chunk):
        i = dup[a:a + chunk]
        out[i] = out[src[a:a + chunk]] + (0.1 / np.sqrt(d)) * rng.standard_normal((len(i), d), dtype=np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def semdedup(x, threshold, seed=0):
    "(seconds clustering, seconds pairing, Groups, set of pairs, growth of the peak RSS in MB)."
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    c = cluster_embeddings(x, k=default_k(len(x)), seed=seed)
    t1 = time.perf_counter()
    g = semdedup_groups(x, c.labels, threshold=threshold)
    t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before  # 0 when an earlier step peaked higher
    order = np.argsort(c.labels, kind='stable')
    pairs = np.concatenate([cluster_pairs(x, m, threshold=threshold) for m in np.split(order, np.flatnonzero(np.diff(c.labels[order])) + 1)])
    return t1 - t0, t2 - t1, g, {tuple(p) for p in pairs.tolist()}, peak


def held_mb(x, threshold, seed=0):
    "Peak MB allocated (tracemalloc) while clustering and pairing `x`: what the step holds beyond its input."
    tracemalloc.start()
    c = cluster_embeddings(x, k=default_k(len(x)), seed=seed)
    semdedup_groups(x, c.labels, threshold=threshold)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def labelled(thresholds=(0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95), radii=(0, 10)):
    "Precision and recall over every pair of the labelled concept set (all real photos: copies, crops, re-framings, colour shifts, one scene's photos): pHash at `radii`, EfficientNet-lite0 cosine at `thresholds`."
    photos = gather_photos()
    files = [photos / r['file'] for r in json.loads((photos / 'photos.json').read_text()) if r['kind'] == 'photo']
    items = concept_set(files)
    x, ok = unit_rows(EfficientNetEmbedder()([it['data'] for it in items]).vectors)
    h = phash_many([it['data'] for it in items])[0]
    i, j, truth, _ = concept_truth(items)
    rows = [dict(method=f"pHash radius {r['radius']}", **{k: r[k] for k in ('matched', 'true_matches', 'precision', 'recall')})
            for r in precision_recall(h, i, j, truth=truth, radii=radii)]
    rows += [dict(method=f"cosine >= {r['threshold']}", **{k: r[k] for k in ('matched', 'true_matches', 'precision', 'recall')})
             for r in cosine_pr(x, i, j, truth=truth, thresholds=thresholds)]
    return dict(photos=len(files), images=len(items), pairs=len(i), true_pairs=int(truth.sum()), embedded=int(ok.sum()),
                rows=[{k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in rows])


def brute(x, threshold):
    "(seconds, set of pairs) of every pair at or above `threshold`, by chunked all-pairs products."
    t = time.perf_counter()
    pairs = cluster_pairs(x, np.arange(len(x)), threshold=threshold)
    return time.perf_counter() - t, {tuple(p) for p in pairs.tolist()}


def main(n=100_000, sample=500, peer_n=100_000, threshold=0.85):
    real, rate = embed_sample(sample)
    x = grow(real, n)
    cl, pr, g, _, peak = semdedup(x, threshold)
    held = held_mb(x, threshold)
    xs = x[:peer_n]
    cl_s, pr_s, _, ours, _ = semdedup(xs, threshold)
    bt, theirs = brute(xs, threshold)
    ours_s = cl_s + pr_s
    return dict(labelled_set=labelled(),
        embedding=dict(model='efficientnet-lite0', device='cpu', images=len(real), images_per_s=round(rate, 1),
                       extrapolated_100k_hours=round(n / rate / 3600, 2),
                       note='EXTRAPOLATED: the 100k embedding time is the measured rate applied to 100k images'),
        vectors=dict(rows=n, dim=int(x.shape[1]), input_mb=round(x.nbytes / 2**20), kind='real embeddings + noise (see docstring)'),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        clusters_100k=dict(k=default_k(n), clustering_s=round(cl, 2), pairing_s=round(pr, 2), total_s=round(cl + pr, 2),
                           peak_rss_growth_mb=round(peak), held_mb=round(held), held_over_input=round(held / (x.nbytes / 2**20), 2), pairs=g.pairs, groups=g.duplicated, threshold=threshold),
        peer=dict(name='brute-force all-pairs cosine (chunked numpy products)', rows=peer_n, brute_s=round(bt, 2),
                  semdedup_s=round(ours_s, 2), speedup=round(bt / ours_s, 2),
                  pairs_brute=len(theirs), pairs_semdedup=len(ours & theirs),
                  pair_recall=round(len(ours & theirs) / max(1, len(theirs)), 4),
                  **({} if peer_n == n else dict(brute_100k_s_extrapolated=round(bt * (n / peer_n) ** 2, 1),
                                                 speedup_100k_extrapolated=round(bt * (n / peer_n) ** 2 / (cl + pr), 1)))))


if __name__ == '__main__':
    p = parser(__doc__)
    p.add_argument('--n', type=int, default=100_000)
    p.add_argument('--sample', type=int, default=500)
    p.add_argument('--peer-n', type=int, default=100_000)
    p.add_argument('--threshold', type=float, default=0.85)
    a = p.parse_args()
    r = main(a.n, a.sample, a.peer_n, a.threshold)
    record('semdedup', **r)
    print(f"semdedup vs brute force at {a.peer_n:,} rows: {r['peer']['speedup']}x faster, "
          f"{r['peer']['pair_recall']:.1%} of the brute-force pairs; at {a.n:,}: {r['clusters_100k']['total_s']} s "
          f"holding {r['clusters_100k']['held_mb']} MB beyond its {r['vectors']['input_mb']} MB input")
