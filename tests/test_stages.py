"""One declaration per stage: `prx_run --print-config`, the console script's flags (and `--help`) and the library
function's defaults all show the value the stage declares, and the runner has nothing between it and the stages."""
import inspect, subprocess, sys, tomllib
from pathlib import Path
import pytest
from fastcore.script import anno_parser
from prx_nb import caption, classify, dedup, ingest, mds, skips, pipeline, tags, semdedup
from prx_nb.stage import Stage, StageRun

BIN = Path(sys.executable).parent

# stage -> (console script, {option: (library function, its parameter)}) for every option a library function takes
SURFACES = {
    'caption': (caption.prx_caption, dict(batch_size=(caption.caption_table, 'batch_size'), commit_rows=(caption.caption_table, 'commit_rows'),
                                          retry_failed=(caption.caption_table, 'retry_failed'), name=(caption.caption_table, 'name'),
                                          endpoint=(caption.Backend, 'endpoint'), concurrency=(caption.Backend, 'concurrency'),
                                          device=(caption.Backend, 'device'), max_new_tokens=(caption.CaptionSpec, 'max_new_tokens'),
                                          max_pixels=(caption.prepare_image, 'max_pixels'))),
    'tags': (tags.prx_tag, dict(batch_size=(tags.tag_table, 'batch_size'), commit_rows=(tags.tag_table, 'commit_rows'),
                                retry_failed=(tags.tag_table, 'retry_failed'), replace=(tags.tag_table, 'replace'), name=(tags.tag_table, 'name'),
                                endpoint=(caption.Backend, 'endpoint'), max_pixels=(caption.prepare_image, 'max_pixels'))),
    'classify': (classify.prx_classify, dict(batch_size=(classify.classify_table, 'batch_size'), commit_rows=(classify.classify_table, 'commit_rows'),
                                             retry_failed=(classify.classify_table, 'retry_failed'), replace=(classify.classify_table, 'replace'),
                                             name=(classify.classify_table, 'name'), backend=(classify.make_classifier, 'backend'),
                                             endpoint=(classify.make_classifier, 'endpoint'), concurrency=(classify.make_classifier, 'concurrency'),
                                             device=(classify.make_classifier, 'device'))),
    'filter': (skips.prx_filter, dict(min_score=(skips.filter_tree, 'min_score'))),
    'ingest': (ingest.prx_ingest, dict(rows_per_fragment=(ingest.ingest, 'rows_per_fragment'), commit_rows=(ingest.ingest, 'commit_rows'),
                                       max_pixels=(ingest.ingest, 'max_pixels'), retry_failed=(ingest.ingest, 'retry_failed'))),
    'mds': (mds.prx_write_mds, dict(shard_bytes=(mds.write_mds, 'shard_bytes'), part_rows=(mds.write_mds, 'part_rows'))),
    'dedup': (dedup.prx_dedup, dict(radius=(dedup.dedup_tree, 'radius'))),
    'semdedup': (semdedup.prx_semdedup, dict(threshold=(semdedup.semdedup_tree, 'threshold'), k=(semdedup.semdedup_tree, 'k'),
                                             seed=(semdedup.semdedup_tree, 'seed'), column=(semdedup.semdedup_tree, 'column'),
                                             embed=(semdedup.semdedup_tree, 'embed'))),
}


def flag_default(script, option):
    "The default of `--option` as the script's parser has it (lists are comma-separated on the command line)."
    return next(a.default for a in anno_parser(script.__wrapped__)._actions if a.dest == option)


@pytest.mark.parametrize('section', sorted(SURFACES))
def test_one_declaration_gives_print_config_flags_and_library_defaults(section):
    stage = {s.section: s for s in pipeline.SECTIONS}[section]
    script, library = SURFACES[section]
    printed = tomllib.loads(pipeline.config_text())[section]
    for option, (default, help) in stage.options().items():
        assert printed[option] == default, (section, option)
        assert pipeline.CONFIG[section][option] == (default, help)
        if option == 'enabled': continue
        if inspect.signature(script).parameters[option].kind != inspect.Parameter.KEYWORD_ONLY: continue  # the script's own (prx_ingest's SOURCES)
        want = ','.join(map(str, default)) if isinstance(default, list) else default
        assert flag_default(script, option) == want, (section, option)
        parser_help = anno_parser(script.__wrapped__).format_help()
        assert f'--{option}' in parser_help and help.split('(')[0][:30] in ' '.join(parser_help.split()), (section, option)
    for option, (fn, param) in library.items():
        assert inspect.signature(fn).parameters[param].default == stage.options()[option][0], (section, option, fn.__name__)


def test_every_section_is_a_stage_and_every_stage_runs_through_one_loop():
    assert all(issubclass(s, Stage) for s in pipeline.SECTIONS + pipeline.STAGES)
    assert [s.section for s in pipeline.STAGES] == ['ingest', 'compact', 'profile', 'phash', 'explore', 'caption', 'tags', 'classify',
                                                   'optout', 'mds', 'dedup', 'semdedup', 'filter', 'views']
    assert all(s.run is not Stage.run for s in pipeline.STAGES), 'a stage without its own run'
    assert not [n for n in dir(pipeline) if n.endswith('_stage')], 'an adapter between the runner and a stage'
    assert inspect.signature(Stage.run).return_annotation in (StageRun, 'StageRun')


def test_print_config_is_the_declarations_and_loads_back(tmp_path):
    out = subprocess.run([str(BIN / 'prx_run'), '--print-config'], capture_output=True, text=True, check=True).stdout
    assert tomllib.loads(out) == {sec: {k: d for k, (d, _) in keys.items()} for sec, keys in pipeline.CONFIG.items()}
    assert 'batch_size = 32' in out and '# images per captioner call' in out


def test_a_flag_with_a_bad_value_names_the_script_and_the_key(tmp_path):
    err = subprocess.run([str(BIN / 'prx_classify'), '--table', str(tmp_path / 't.lance'), '--caption-column', 'c',
                          '--labels', 'visual'], capture_output=True, text=True)
    assert err.returncode != 0 and 'labels must be at least two distinct words' in err.stderr, err.stderr
    err = subprocess.run([str(BIN / 'prx_dedup'), '--mds', str(tmp_path), '--radius', 'x'], capture_output=True, text=True)
    assert err.returncode != 0 and "argument --radius: invalid int value: 'x'" in err.stderr, err.stderr


@pytest.mark.parametrize('script', ['prx_caption', 'prx_tag', 'prx_classify', 'prx_filter', 'prx_ingest', 'prx_write_mds', 'prx_dedup'])
def test_declared_scripts_help_shows_the_options_with_defaults(script):
    r = subprocess.run([str(BIN / script), '--help'], capture_output=True, text=True)
    assert r.returncode == 0 and 'Traceback' not in r.stderr, r.stderr
    assert '(default:' in r.stdout and '--quiet' in r.stdout, r.stdout
