"Caption classification end to end: a killed `prx_classify` resumed, the tiny LLM behind a real `transformers serve`, and the labels as skip lists read by the trainer's loader, Mosaic's stock reader and `prx_check`."
import signal, socket, subprocess, time, warnings
import pyarrow.parquet as pq
import lance, pandas as pd, pyarrow as pa, pytest
from conftest import BIN
from prx_nb.classify import LABELS, ClassifySpec, OpenAIClassifier, caption_set, classify_table
from prx_nb.skips import filter_tree
from prx_nb.testing import tiny_llm

OK_STATUS = ('ok', 'no_caption', 'unparseable', 'empty', 'rejected', 'error')


def caption_table(path, n):
    "A Lance table of `n` usable rows whose captions cycle through the shipped caption set, a few empty."
    caps = list(caption_set().caption)
    cap = [None if k % 97 == 5 else caps[k % len(caps)] for k in range(n)]
    t = pa.table({'id': [f'r{k:05d}' for k in range(n)], 'status': ['ok'] * n, 'caption_x': cap})
    lance.write_dataset(t, path, max_rows_per_file=n // 4)
    return str(path)


def labels_of(table, name='k'):
    return lance.dataset(table).to_table(columns=['id', f'label_{name}', f'label_{name}_score', f'label_{name}_status']).to_pandas().set_index('id').sort_index()


@pytest.mark.slow
def test_killed_run_resumes_without_redoing_or_losing_rows(tmp_path):
    n = 3000
    table = caption_table(tmp_path / 'killed.lance', n)
    ref = caption_table(tmp_path / 'ref.lance', n)
    cmd = lambda t: [str(BIN / 'prx_classify'), '--table', t, '--caption-column', 'caption_x', '--column', 'k',
                     '--batch-size', '100', '--commit-rows', '300', '--quiet']
    p = subprocess.Popen(cmd(table), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, done = time.time() + 180, 0
    while time.time() < deadline and p.poll() is None:
        ds = lance.dataset(table)
        if 'label_k_status' in ds.schema.names and (done := ds.count_rows('label_k_status IS NOT NULL')) >= 600: break
        time.sleep(0.05)
    assert p.poll() is None, f'finished before it could be killed: {p.communicate()}'
    p.send_signal(signal.SIGKILL); p.wait()
    before = labels_of(table)
    done = int(before.label_k_status.notna().sum())
    assert 0 < done < n, done
    out = subprocess.run(cmd(table), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith(f'{n - done:,} rows labelled'), out.stdout   # only what was missing
    after = labels_of(table)
    assert len(after) == n and after.index.is_unique and after.label_k_status.notna().all()
    pd.testing.assert_frame_equal(after.loc[before.label_k_status.notna()], before.loc[before.label_k_status.notna()])  # kept as they were
    assert subprocess.run(cmd(ref), capture_output=True, text=True).returncode == 0
    pd.testing.assert_frame_equal(after, labels_of(ref))                    # the same as an uninterrupted run
    empty = after.label_k_status.str.startswith('no_caption')
    assert empty.sum() == sum(1 for k in range(n) if k % 97 == 5) and after.label_k[empty].isna().all()
    assert set(after.label_k.dropna()) == set(LABELS)


def test_tiny_llm_gives_every_row_a_label_or_a_reason(tmp_path):
    table = caption_table(tmp_path / 't.lance', 200)
    mdir = tiny_llm(tmp_path / 'tiny')
    out = subprocess.run([str(BIN / 'prx_classify'), '--table', table, '--caption-column', 'caption_x', '--column', 'k',
                          '--backend', 'transformers', '--model', mdir, '--batch-size', '16', '--limit', '120', '--quiet'],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    t = labels_of(table)
    done = t[t.label_k_status.notna()]
    assert len(done) == 120
    ok = done.label_k_status == 'ok'
    assert done.label_k[ok].isin(LABELS).all() and done.label_k_score[ok].between(0, 1).all()
    assert done.label_k_status[~ok].str.startswith('no_caption').all() and done.label_k[~ok].isna().all()
    meta = {k.decode(): v.decode() for k, v in lance.dataset(table).schema.field('label_k').metadata.items()}
    assert meta['prompt_version'] == 'prx-classify-1' and meta['caption_column'] == 'caption_x' and meta['model'] == mdir
    bad = subprocess.run([str(BIN / 'prx_classify'), '--table', table, '--caption-column', 'caption_x', '--column', 'k', '--quiet'],
                         capture_output=True, text=True)   # minilm on top of the tiny model's labels: refused, with what to do
    assert bad.returncode != 0 and '--replace' in bad.stderr and 'Traceback' not in bad.stderr


def free_port():
    with socket.socket() as s: s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


@pytest.mark.slow
def test_real_openai_server_that_ignores_the_constraint(tmp_path):
    "`transformers serve` on the tiny LLM: no structured outputs there, so replies are free text, parsed strictly."
    from prx_nb.testing import transformers_serve
    mdir = tiny_llm(tmp_path / 'tiny')
    with transformers_serve(mdir, tmp_path) as url:
        c = OpenAIClassifier(url, ClassifySpec(mdir, max_new_tokens=4), concurrency=4, timeout=60)
        table = caption_table(tmp_path / 'srv.lance', 40)
        r = classify_table(table, c, 'k', caption_column='caption_x', batch_size=20, progress=False)
    t = labels_of(table)
    assert r.rows == 40 and t.label_k_status.notna().all()
    kinds = t.label_k_status.str.split(':').str[0]
    assert kinds.isin(OK_STATUS).all(), kinds.value_counts()
    assert (t.label_k.notna() == (kinds == 'ok')).all() and t.label_k.dropna().isin(LABELS).all()
    assert (kinds != 'rejected').all()   # a server that refuses the constraint fields is asked again without them


@pytest.mark.slow
def test_labels_become_skip_lists_every_reader_honours(tmp_path, demo):
    from streaming import StreamingDataset, Stream
    from prx_nb.explore import add_tags
    from prx_nb.ingest import ingest
    from prx_nb.demo import demo_sources, DemoTruth
    from prx_nb.mds import write_mds
    from prx_nb.tree import iter_buckets, bucket_key
    from prx_nb.classify import MiniLMClassifier
    from prx_nb.loader import tree_dataset
    from prx_nb.skips import check_tree
    truth = DemoTruth.load(demo / 'truth.json')
    table = str(tmp_path / 'c.lance')
    ingest(table, demo_sources(demo), progress=False)
    add_tags(table, progress=False)
    w = write_mds(table, tmp_path / 'mds', progress=False)
    classify_table(table, MiniLMClassifier(), 'kind', caption_column='caption_tags', progress=False)
    out = subprocess.run([str(BIN / 'prx_filter'), '--table', table, '--mds', str(tmp_path / 'mds'), '--label-column', 'label_kind', '--quiet'],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'samples skipped as text, nsfw' in out.stdout and '512/' in out.stdout
    labelled = set(lance.dataset(table).to_table(columns=['id'], filter="label_kind = 'text'")['id'].to_pylist())
    in_tree = {i for b in iter_buckets(tmp_path / 'mds') for i in pq.read_table(b / 'manifest.parquet')['id'].to_pylist()}
    text = labelled & in_tree
    assert len(text & set(truth.text)) > len(set(truth.text) & in_tree) / 2   # the planted text images, mostly
    def served(**kw):
        ds = tree_dataset(tmp_path / 'mds', batch_size=1, on_skip='drop', shuffle=False, **kw)
        ids = [s['id'] for s in ds]
        del ds
        return ids
    with pytest.warns(UserWarning, match='is left out of the tree dataset'):
        filtered = served()
    assert not set(filtered) & text and len(filtered) == len(set(filtered)) == len(in_tree) - len(text)
    assert set(served(reasons=['dedup'])) >= text                          # the ablation: without the text filter
    streams = [Stream(local=str(b)) for b in iter_buckets(tmp_path / 'mds')]
    stock = StreamingDataset(streams=streams, batch_size=1, shuffle=False)
    assert sorted(s['id'] for s in stock) == sorted(in_tree)                # nothing rewritten: the stock reader sees all
    assert not (check_tree(tmp_path / 'mds').level == 'error').any()
    # relabelled with a strict threshold, the lists are replaced, not added to
    f = filter_tree(tmp_path / 'mds', table, 'label_kind', labels=['text'], min_score=0.999, progress=False)
    assert f.skipped < len(text)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')   # a bucket may be wholly skipped still: said by a warning, as above
        assert len(served()) == len(in_tree) - f.skipped
    assert w.written == len(in_tree) and {bucket_key(b) for b in iter_buckets(tmp_path / 'mds')} == set(w.buckets)

