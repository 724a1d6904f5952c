"""Structured tags: rows/s of the tag fill (`tag_table`, the default schema) with the tiny random-weight VLM in process, constrained by
xgrammar against the same model writing free text (the peer: the constraint's cost), and behind a real `transformers serve` (which takes
`response_format` without enforcing it); and the schema-valid share of each. No real VLM runs here: the tiny model measures the fill's
and the constraint's own cost, not a model's speed or its tags' quality.

Goal (issue 33): 100% schema-valid under constrained decoding.
Usage: python bench/bench_tags.py [--rows N] [--batch N]
"""
import shutil, tempfile
from pathlib import Path
from common import record, parser
from prx_nb.caption import TransformersCaptioner, OpenAICaptioner
from prx_nb.tags import tag_spec, tag_table, tag_schema
from prx_nb.testing import tiny_vlm, transformers_serve
from prx_nb.demo import build_demo, demo_sources
from prx_nb.ingest import ingest

MAX_PIXELS = 128 * 128


def table(d, name):
    t = str(d / name)
    ingest(t, demo_sources(d / 'src'), progress=False)
    return t


def row(how, r, extra=None):
    return dict(path=how, rows=r.rows, seconds=round(r.seconds, 2), rows_per_s=round(r.rows_per_s, 2),
                valid_share=round(r.valid_share, 3), tokens_per_row=round(r.output_tokens / max(r.rows, 1), 1),
                tokens_per_s=round(r.output_tokens / r.seconds, 1) if r.seconds else None,
                outcomes=r.statuses) | (extra or {})


def free_text(t, mdir, batch, limit):
    "The same model and prompt without the constraint, through the same fill (its answers validated the same way)."
    c = TransformersCaptioner(mdir, spec=tag_spec(mdir, max_pixels=MAX_PIXELS, json_schema=''), batch_size=batch)
    spec = tag_spec(mdir, max_pixels=MAX_PIXELS)
    class Free:  # the unconstrained captioner, carrying the schema the answers are judged by
        def __init__(self): self.spec = spec
        def caption(self, images): return c.caption(images)
    return tag_table(t, Free(), limit=limit, batch_size=batch, progress=False)


def served(t, mdir, limit, concurrency=4):
    with transformers_serve(mdir) as url:
        c = OpenAICaptioner(url, tag_spec(mdir, max_pixels=MAX_PIXELS), concurrency=concurrency)
        return tag_table(t, c, limit=limit, batch_size=16, progress=False), dict(concurrency=concurrency, enforced=False)


def main():
    p = parser(__doc__)
    p.add_argument('--batch', type=int, default=16, help='images per generate call in process')
    p.add_argument('--served-rows', type=int, default=32, help='rows tagged behind transformers serve')
    a = p.parse_args()
    d = Path(tempfile.mkdtemp())
    try:
        build_demo(d / 'src', embeddings=False)
        mdir = tiny_vlm(d / 'tiny')
        c = TransformersCaptioner(mdir, spec=tag_spec(mdir, max_pixels=MAX_PIXELS), batch_size=a.batch)
        c.caption([])  # loaded
        rows = [row('in process, constrained (xgrammar)', tag_table(table(d, 'a.lance'), c, batch_size=a.batch, progress=False), dict(batch=a.batch))]
        rows.append(row('in process, free text (peer: no constraint)', free_text(table(d, 'b.lance'), mdir, a.batch, None), dict(batch=a.batch)))
        r, extra = served(table(d, 'c.lance'), mdir, a.served_rows)
        rows.append(row('transformers serve, response_format (not enforced)', r, extra))
        ratio = rows[0]['rows_per_s'] / rows[1]['rows_per_s']
        per_token = rows[0]['tokens_per_s'] / rows[1]['tokens_per_s']
        print(f"constrained / free text: rows/s {ratio:.2f}x, tokens/s {per_token:.2f}x; schema-valid: constrained {rows[0]['valid_share']:.0%}, "
              f"free {rows[1]['valid_share']:.0%}, served {rows[2]['valid_share']:.0%}")
        record('tags', schema=tag_schema(), max_pixels=MAX_PIXELS, rows=rows, constrained_over_free_rows_per_s=round(ratio, 2),
               constrained_over_free_tokens_per_s=round(per_token, 2),
               goal_valid_share=1.0, goal_met=rows[0]['valid_share'] == 1.0,
               note='tiny random-weight Qwen2-VL on this machine\'s CPU: the fill and constraint cost, not a real VLM')
    finally: shutil.rmtree(d, ignore_errors=True)


if __name__ == '__main__':
    main()
