"Buckets on the trainer's patch grid: PRX's `ArAwareResize` targets, `bucket_sizes(patch=)`, `off_grid`, `[mds] patch`."
import io, math
import pytest
from PIL import Image
from prx_nb.bucket import TIERS, Bucketer, bucket_sizes, off_grid, trainer_grid, trainer_target, _best_size
from prx_nb.testing import tiny_image


def kept_as_is(w, h, tier, patch):
    """The trainer's rule, written out here on its own: targets are the grid sizes, one per aspect; an image goes
    to the target of nearest aspect w/h; a bucket is kept as it is when that target is the bucket itself."""
    by_aspect = {gw / gh: (gw, gh) for gw, gh in trainer_grid(tier, patch)}
    return by_aspect[min(by_aspect, key=lambda a: abs(a - w / h))] == (w, h)


@pytest.mark.parametrize('tier, patch', [(t, p) for t in (256, 512, 1024, 2048, 4096) for p in (16, 32, 64)])
def test_grid_sizes_hold_about_n_squared_patches_on_a_16_pixel_grid(tier, patch):
    g, n = trainer_grid(tier, patch), tier // patch
    assert g == sorted(set(g)) and g
    for w, h in g:
        assert w % 16 == h % 16 == 0 and w % patch == h % patch == 0
        nw, nh = w // patch, h // patch
        # floor(n²/nw)·nw: never more than n² patches, fewer by less than one row (or column) of them
        assert n * n - max(nw, nh) < nw * nh <= n * n
        assert 0.5 - 0.1 < w / h < 2.0 + 0.25  # the patch counts reach just past the range at a coarse grid
    assert {(h, w) for w, h in g} == set(g)  # every size's transpose is there
    if tier % 16 == 0: assert (tier, tier) in g


def test_grid_at_1024_with_32_pixel_patches_by_hand():
    n2, want = 32 * 32, set()
    for nw in range(math.ceil(math.sqrt(n2 * 0.5)), math.floor(math.sqrt(n2 * 2.0)) + 1): want.add((nw * 32, n2 // nw * 32))
    for nh in range(math.ceil(math.sqrt(n2 / 2.0)), math.floor(math.sqrt(n2 / 0.5)) + 1): want.add((n2 // nh * 32, nh * 32))
    g = trainer_grid(1024, 32)
    assert g == sorted(s for s in want if s[0] % 16 == 0 and s[1] % 16 == 0)
    assert (len(g), g[0], g[-1]) == (27, (704, 1440), (1440, 704)) and (1440, 720) not in g  # 2:1 would need 22.5 patches
    assert len({w / h for w, h in g}) == len(g)  # one size per aspect: the trainer's dict loses none


@pytest.mark.parametrize('tier', [512, 1024, 2048])
def test_patch_32_buckets_are_all_kept_as_they_are(tier):
    b = bucket_sizes(tier, patch=32)
    assert len(b) == 13 and b[6] == (tier, tier)
    assert all(kept_as_is(w, h, tier, 32) for w, h in b), [s for s in b if not kept_as_is(*s, tier, 32)]
    assert [w / h for w, h in b] == sorted(w / h for w, h in b)  # portrait to landscape
    assert b[:6] == [(h, w) for w, h in b[:6:-1]]  # portrait = transposed landscape
    assert off_grid(b, tier, 32) == []
    # each ratio went to the grid size nearest it in log aspect
    ratios = [2 ** (k / 6) for k in range(-6, 7)]
    grid = trainer_grid(tier, 32)
    for r, (w, h) in zip(ratios, b):
        assert abs(math.log(w / h / r)) == min(abs(math.log(gw / gh / r)) for gw, gh in grid)


def test_default_bucket_sizes_are_unchanged():
    for t in (*TIERS, 256, 640, 1000):
        half = 6
        land = [_best_size(t, 2.0 ** (k / half), 16) for k in range(half + 1)]
        assert bucket_sizes(t) == bucket_sizes(t, patch=None) == [(h, w) for w, h in land[:0:-1]] + land
    assert bucket_sizes(512) == [(352, 704), (384, 672), (400, 640), (416, 592), (448, 576), (480, 544), (512, 512),
                                 (544, 480), (576, 448), (592, 416), (640, 400), (672, 384), (704, 352)]
    assert Bucketer().buckets == Bucketer(patch=None).buckets == {t: bucket_sizes(t) for t in TIERS}


def test_two_ratios_on_one_size_give_one_bucket():
    b = bucket_sizes(256, patch=32)  # 8 patches a side: a coarse grid
    assert b == [(160, 352), (192, 320), (224, 288), (256, 256), (288, 224), (320, 192), (352, 160)]
    assert len(set(b)) == len(b) and b[len(b) // 2] == (256, 256) and off_grid(b, 256, 32) == []
    assert len(bucket_sizes(1024, patch=32, count=3)) == 3


def test_off_grid_names_the_default_buckets_the_trainer_resizes_at_1024_32():
    default = bucket_sizes(1024)
    off = off_grid(default, 1024, 32)
    assert [s for s, _ in off] == [s for s in default if not kept_as_is(*s, 1024, 32)]
    assert [s for s in default if s not in dict(off)] == [(960, 1088), (1024, 1024), (1088, 960)]
    assert dict(off)[(1440, 720)] == (1440, 704) and dict(off)[(1200, 848)] == (1184, 864)
    for (w, h), t in off:
        assert t in trainer_grid(1024, 32) and t == trainer_target(w, h, tier=1024, patch=32)
    # a plain function of sizes: repeated sizes, numpy ints and a tree's order are fine
    import numpy as np
    assert off_grid(np.array([[1440, 720], [1440, 720], [1024, 1024]]), 1024, 32) == [((1440, 720), (1440, 704))]
    assert off_grid(bucket_sizes(1024, patch=32), 1024, 32) == []
    assert off_grid([], 1024, 32) == []


def test_tiers_the_patch_does_not_fit_are_refused_naming_tier_and_patch():
    for call in (lambda: bucket_sizes(1000, patch=32), lambda: Bucketer(tiers=(512, 1000), patch=32),
                 lambda: off_grid([(1024, 1024)], 1000, 32)):
        with pytest.raises(ValueError, match='patch 32.*tier 1000'): call()
    with pytest.raises(ValueError, match="patch 10 at tier 100: the trainer's grid is empty"): bucket_sizes(100, patch=10)
    for bad in (0, -32, 32.0, True):
        with pytest.raises(ValueError, match='patch must be a positive'): bucket_sizes(1024, patch=bad)


def test_bucketer_with_patch_encodes_into_a_bucket_on_the_grid():
    bk = Bucketer(patch=32)
    assert bk.patch == 32 and all(off_grid(bk.buckets[t], t, 32) == [] for t in TIERS)
    for w, h in [(1600, 1200), (1200, 1600), (2000, 1000), (700, 700), (3000, 2000)]:
        r = bk(tiny_image(w, h))
        assert r.ok, r
        assert Image.open(io.BytesIO(r.jpeg)).size == (r.width, r.height)
        assert (r.width, r.height) in bk.buckets[r.tier] and kept_as_is(r.width, r.height, r.tier, 32), r
    r, plain = bk(tiny_image(1600, 1200)), Bucketer()(tiny_image(1600, 1200))
    assert (r.tier, r.bucket, plain.bucket) == (1024, '1184x864', '1200x848')
    assert not kept_as_is(plain.width, plain.height, 1024, 32)
    # the table planner's vectorised assignment agrees with the scalar one on the snapped buckets
    import numpy as np
    W, H = np.random.default_rng(0).integers(300, 6000, (2, 2000))
    tier, bw, bh, _ = bk.assign_many(W, H)
    assert [(int(t), (int(a), int(b)) if t else None) for t, a, b in zip(tier, bw, bh)] == \
           [bk.assign(int(x), int(y))[:2] for x, y in zip(W, H)]


@pytest.fixture
def source(tmp_path):
    d = tmp_path / 'src'; d.mkdir()
    (d / 'a.jpg').write_bytes(tiny_image(800, 600))
    return f'folder:{d}'


def test_config_patch_is_passed_and_checked(tmp_path, source):
    from prx_nb.pipeline import CONFIG, config_text, load_config
    from prx_nb.mds import WriteMDS
    assert CONFIG['mds']['patch'][0] == 0 and 'patch = 0' in config_text()
    c = load_config({'ingest': {'sources': [source]}})
    assert c['mds']['patch'] == 0 and WriteMDS(**c['mds']).bucketer().buckets == Bucketer(c['mds']['tiers']).buckets
    c = load_config({'ingest': {'sources': [source]}, 'mds': {'patch': 32, 'tiers': [512, 1024, 2048]}})
    bucketer = WriteMDS(**c['mds']).bucketer()
    assert bucketer.patch == 32 and bucketer.buckets[1024] == bucket_sizes(1024, patch=32)
    # a TOML file, as prx_run reads it
    p = tmp_path / 'run.toml'
    p.write_text(config_text({'ingest': {'sources': [source]}, 'mds': {'patch': 32, 'tiers': [1000, 1024]}}))
    with pytest.raises(ValueError, match=r'mds\.patch') as e: load_config(p)
    assert 'tier 1000' in str(e.value) and str(p) in str(e.value)
    for mds, key in [({'patch': 32, 'tiers': [512, 1000]}, r'mds\.patch 32 does not fit mds\.tiers'),
                     ({'patch': -32}, r'mds\.patch must be 0 \(off\)'),
                     ({'patch': 10, 'tiers': [100]}, r"mds\.patch .*the trainer's grid is empty"),
                     ({'patch': 32.0}, r'mds\.patch must be int'),
                     ({'patch': 32, 'tiers': [32]}, r'config: mds tiers must be sizes of at least 64')]:
        with pytest.raises(ValueError, match=key): load_config({'ingest': {'sources': [source]}, 'mds': mds})


def test_prx_run_refuses_a_tier_the_patch_does_not_divide(tmp_path, source):
    import subprocess
    from conftest import BIN
    from prx_nb.pipeline import config_text
    p = tmp_path / 'run.toml'
    p.write_text(config_text({'run': {'out': str(tmp_path / 'out')}, 'ingest': {'sources': [source]},
                              'mds': {'patch': 48, 'tiers': [512, 1024]}}))
    r = subprocess.run([str(BIN / 'prx_run'), str(p), '--quiet'], capture_output=True, text=True)
    assert r.returncode != 0 and 'Traceback' not in r.stderr, r.stderr[-2000:]
    assert 'mds.patch 48' in r.stderr and 'tier 512' in r.stderr, r.stderr
    assert not (tmp_path / 'out' / 'corpus.lance').exists()
