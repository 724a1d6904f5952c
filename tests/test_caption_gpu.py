"The vLLM backend, in-process: runs only where vLLM and a CUDA GPU exist (marked gpu; skipped elsewhere, with the reason)."
import pytest

vllm = pytest.importorskip('vllm', reason='vLLM is not installed here (it belongs in a GPU environment)')
torch = pytest.importorskip('torch')
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA device')]


def test_vllm_captions_the_tiny_model(tmp_path):
    from prx_nb.caption import CaptionSpec, VLLMCaptioner, prepare_image
    from prx_nb.testing import tiny_vlm
    from prx_nb.testing import tiny_image
    mdir = tiny_vlm(tmp_path / 'tiny')
    c = VLLMCaptioner(mdir, CaptionSpec(mdir, max_new_tokens=16), max_model_len=1024, limit_mm_per_prompt={'image': 1}, enforce_eager=True)
    out = c.caption([prepare_image(tiny_image(320, 240))[0]] * 3)
    assert len(out) == 3 and all(r.status in ('ok', 'truncated', 'empty') for r in out)
    assert len({r.text for r in out}) == 1  # greedy: the same image gives the same text
