"""Caption classification: the offline backend (MiniLM + logistic regression) against its floor and its peer, in one run.

- floor: MiniLM's forward pass alone over the same captions (the classifier adds a logistic regression on top)
- table path: `classify_table` over a Lance table of the same captions (scan, classify, write back in place)
- peer: the keyword rule a user would write from the candidate queries (`TEXT_QUERY`, `NSFW_QUERY`): speed and held-out F1
- reference: the post's LLM pass, about 200 captions/s per GPU (Qwen3-8B); no LLM runs here

Usage: python bench/bench_classify.py [--n N]
"""
import tempfile, time
import lance, numpy as np, pyarrow as pa
from common import record, parser
from prx_nb.classify import MiniLMClassifier, caption_set, classify_table, TEXT_QUERY, NSFW_QUERY, LABELS


def keyword_rule(caption, nsfw=frozenset(NSFW_QUERY.split()), text=frozenset(w.strip('"') for w in TEXT_QUERY.split())):
    "nsfw when a nudity word appears, else text when a text-artefact word appears, else visual."
    words = set(caption.lower().replace(',', ' ').replace('.', ' ').split())
    return 'nsfw' if words & nsfw else 'text' if words & text or 'web site' in caption.lower() else 'visual'


def macro_f1(y, p):
    from sklearn.metrics import f1_score
    return round(float(f1_score(y, p, labels=list(LABELS), average='macro')), 3)


def main(n):
    cs = caption_set()
    test = cs[cs.split == 'test']
    caps = (list(cs.caption) * (n // len(cs) + 1))[:n]
    mc = MiniLMClassifier()
    mc.classify(caps[:64])  # warm
    t = time.perf_counter(); mc.embed(caps); floor = time.perf_counter() - t
    t = time.perf_counter(); mc.classify(caps); ours = time.perf_counter() - t
    t = time.perf_counter(); [keyword_rule(c) for c in caps]; peer = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as d:
        tab = lance.write_dataset(pa.table({'id': [f'r{k}' for k in range(n)], 'status': ['ok'] * n, 'caption_x': caps}), f'{d}/t.lance').uri
        t = time.perf_counter(); r = classify_table(tab, mc, 'k', caption_column='caption_x', progress=False); table = time.perf_counter() - t
        assert r.rows == n
    res = dict(captions=n, minilm_captions_per_s=round(n / ours, 1), embedding_floor_captions_per_s=round(n / floor, 1),
               minilm_over_floor=round(ours / floor, 3), table_path_captions_per_s=round(n / table, 1),
               table_over_classifier=round(table / ours, 3), keywords_captions_per_s=round(n / peer, 1),
               post_llm_captions_per_s_per_gpu=200,
               held_out=dict(captions=len(test), minilm_macro_f1=macro_f1(test.label, [v.label for v in mc.classify(list(test.caption))]),
                             keywords_macro_f1=macro_f1(test.label, [keyword_rule(c) for c in test.caption])))
    print(f"minilm {res['minilm_captions_per_s']} captions/s = {res['minilm_over_floor']}x the embedding floor's time; "
          f"through the table {res['table_path_captions_per_s']} captions/s ({res['table_over_classifier']}x); "
          f"keywords {res['keywords_captions_per_s']} captions/s at macro F1 {res['held_out']['keywords_macro_f1']} "
          f"vs minilm {res['held_out']['minilm_macro_f1']}; the post's LLM: ~200 captions/s per GPU")
    return record('classify', **res)


if __name__ == '__main__':
    p = parser(__doc__)
    p.add_argument('--n', type=int, default=5000, help='captions classified')
    main(p.parse_args().n)
