"""Fixtures for the tests and the notebooks' examples: tiny images, tiny random-weight models, and console
scripts run in this process. Written by hand (no notebook exports it); not part of prx_nb's API."""
from __future__ import annotations
import io
from contextlib import contextmanager
from pathlib import Path
from PIL import Image

__all__ = ['tiny_image', 'tiny_hf_checkpoint', 'tiny_tokenizer', 'tiny_vlm', 'tiny_llm', 'transformers_serve', 'run_script', 'script_exit']


def tiny_image(w:int=64, # width in pixels
               h:int=48, # height in pixels
               fmt:str='JPEG', # any Pillow format name
               *,
               mode:str='RGB', # Pillow mode to save in
               **save_kw)->bytes:
    "A deterministic `w`×`h` gradient encoded as `fmt`."
    import numpy as np
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) % 256], -1).astype('uint8')
    im = Image.fromarray(rgb, 'RGB')
    if mode != 'RGB': im = im.convert(mode)
    buf = io.BytesIO()
    im.save(buf, fmt, **save_kw)
    return buf.getvalue()


def tiny_hf_checkpoint(path:str|Path, # the folder to write (created)
                       kind:str='clip', # 'clip', 'siglip' or 'dinov2'
                       *,
                       width:int=16, # hidden size (CLIP's projection is half of it)
                       seed:int=0, # weight initialisation seed
                      )->Path:
    "A tiny random-weight CLIP, SigLIP or DINOv2 checkpoint at `path`."
    import torch
    from transformers import (BitImageProcessor, CLIPConfig, CLIPImageProcessor, CLIPModel, Dinov2Config,
                              Dinov2Model, SiglipConfig, SiglipImageProcessor, SiglipModel)
    if kind not in ('clip', 'siglip', 'dinov2'): raise ValueError(f"kind must be 'clip', 'siglip' or 'dinov2', not {kind!r}")
    torch.manual_seed(seed)
    tiny = dict(hidden_size=width, intermediate_size=2 * width, num_hidden_layers=1, num_attention_heads=2)
    crop = dict(size={'shortest_edge': 32}, crop_size={'height': 32, 'width': 32})
    if kind == 'clip':
        cfg = CLIPConfig(text_config=dict(tiny, vocab_size=100), vision_config=dict(tiny, image_size=32, patch_size=8),
                         projection_dim=width // 2)
        CLIPModel(cfg).save_pretrained(path)
        CLIPImageProcessor(**crop).save_pretrained(path)
    elif kind == 'siglip':
        SiglipModel(SiglipConfig(text_config=dict(tiny, vocab_size=100), vision_config=dict(tiny, image_size=32, patch_size=8))).save_pretrained(path)
        SiglipImageProcessor(size={'height': 32, 'width': 32}).save_pretrained(path)
    else:
        Dinov2Model(Dinov2Config(**tiny, image_size=32, patch_size=8)).save_pretrained(path)
        BitImageProcessor(**crop).save_pretrained(path)
    return Path(path)


@contextmanager
def transformers_serve(model_dir, # a local model directory
                       tmp=None, # the server's TMPDIR (default: the process's)
                       timeout:float=120.0, # seconds to wait for it to answer
                      ):
    "A real `transformers serve` process on `model_dir` at a free loopback port, CPU only: its base URL (ending in /v1) while the block runs."
    import os, signal, socket, subprocess, sys, time, requests
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
    env = dict(os.environ, HF_HUB_OFFLINE='1') | ({'TMPDIR': str(tmp)} if tmp else {})
    srv = subprocess.Popen([str(Path(sys.executable).parent / 'transformers'), 'serve', '--host', '127.0.0.1', '--port', str(port),
                            '--device', 'cpu', '--force_model', str(model_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.time() + timeout
        while True:
            try:
                if requests.get(f'http://127.0.0.1:{port}/health', timeout=1).ok: break
            except requests.RequestException: pass
            if srv.poll() is not None or time.time() > deadline:
                raise RuntimeError(f'transformers serve on {model_dir} did not answer within {timeout:.0f} s (exit code {srv.poll()})')
            time.sleep(0.3)
        yield f'http://127.0.0.1:{port}/v1'
    finally:
        srv.send_signal(signal.SIGTERM); srv.wait(timeout=30)


def run_script(f, # a console script (a `call_parse` function)
               *args, # its command line
              )->str:
    "What the console script `f` prints when run on the command line `args`."
    import io, sys
    from contextlib import redirect_stdout
    from unittest import mock
    with mock.patch.object(sys, 'argv', [f.__name__, *map(str, args)]), redirect_stdout(io.StringIO()) as out: f()
    return out.getvalue()


def script_exit(f, # a console script (a `call_parse` function)
                *args, # its command line
               )->str:
    "The message the console script `f` exits with on the command line `args`."
    try: run_script(f, *args)
    except SystemExit as e: return str(e)
    raise AssertionError(f'{f.__name__} {" ".join(map(str, args))} did not exit')


_SPECIAL = ['<|endoftext|>', '<|im_start|>', '<|im_end|>', '<|vision_start|>', '<|vision_end|>',
            '<|image_pad|>', '<|video_pad|>']
_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
_CORPUS = ['A photo of a cat sitting on a red sofa next to a window.',
           'A dog runs across a green field under a blue sky.',
           'Two people are walking along the beach at sunset.',
           'The image shows a city street with cars, buses and tall buildings.',
           'A small boat floats on a calm lake surrounded by mountains.',
           "0123456789 , . ; : ! ? ' ( ) - / %"]

def tiny_tokenizer():
    "A tiny byte-level BPE tokenizer with Qwen's special tokens."
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import Qwen2TokenizerFast
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder, tok.post_processor = decoders.ByteLevel(), processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=_SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_CORPUS, trainer)
    tk = Qwen2TokenizerFast(tokenizer_object=tok, bos_token=None, eos_token='<|im_end|>',
                            pad_token='<|endoftext|>', unk_token=None, additional_special_tokens=_SPECIAL[1:],
                            model_max_length=4096, clean_up_tokenization_spaces=False)
    tk.chat_template = _TEMPLATE
    return tk


def tiny_vlm(out_dir, # where to save the model directory
             seed:int=0, # weights are deterministic for a seed
            )->str:
    "Build and save a tiny random-weight Qwen2-VL that runs offline."
    import torch
    from pathlib import Path
    from transformers import (GenerationConfig, Qwen2VLConfig, Qwen2VLForConditionalGeneration,
                              Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor)
    tk = tiny_tokenizer()
    px = dict(size={'shortest_edge': 28 * 28 * 4, 'longest_edge': 28 * 28 * 16}, min_pixels=28 * 28 * 4,
              max_pixels=28 * 28 * 16, patch_size=14, temporal_patch_size=2, merge_size=2)
    proc = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(**px), tokenizer=tk,
                            video_processor=Qwen2VLVideoProcessor(**px), chat_template=_TEMPLATE)
    ids = {t: tk.convert_tokens_to_ids(t) for t in _SPECIAL}
    vocab = (len(tk) + 63) // 64 * 64
    special = dict(bos_token_id=ids['<|endoftext|>'], eos_token_id=ids['<|im_end|>'],
                   pad_token_id=ids['<|endoftext|>'])
    # initializer_range 0.2: varied text (0.02 repeats one token)
    text = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                rope_scaling={'type': 'mrope', 'mrope_section': [2, 3, 3]},
                tie_word_embeddings=True, initializer_range=0.2, **special)
    vision = dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, in_channels=3, initializer_range=0.2)
    cfg = Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=ids['<|image_pad|>'],
                        video_token_id=ids['<|video_pad|>'], vision_start_token_id=ids['<|vision_start|>'],
                        vision_end_token_id=ids['<|vision_end|>'], tie_word_embeddings=True, **special)
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(cfg).eval()
    printable = lambda i: (i < len(tk) and i not in tk.all_special_ids and (s := tk.decode([i]))
                           and all(32 <= ord(c) < 127 for c in s))
    stops = special | dict(eos_token_id=[ids['<|im_end|>'], ids['<|endoftext|>']])
    suppress = [i for i in range(vocab) if i != ids['<|im_end|>'] and not printable(i)]
    model.generation_config = GenerationConfig(do_sample=False, **stops, suppress_tokens=suppress)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    proc.save_pretrained(out)
    tk.save_pretrained(out)
    return str(out)


def tiny_llm(out_dir, # where to save the model directory
             seed:int=0, # weights are deterministic for a seed
            )->str:
    "Build and save a tiny random-weight Qwen2 causal LM that runs offline."
    import torch
    from pathlib import Path
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM
    tk = tiny_tokenizer()
    vocab = (len(tk) + 63) // 64 * 64
    eos, pad = tk.convert_tokens_to_ids('<|im_end|>'), tk.convert_tokens_to_ids('<|endoftext|>')
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      tie_word_embeddings=True, initializer_range=0.2, bos_token_id=pad, eos_token_id=eos, pad_token_id=pad)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg).eval()
    model.generation_config = GenerationConfig(do_sample=False, eos_token_id=[eos, pad], pad_token_id=pad)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tk.save_pretrained(out)
    return str(out)
