"""Captioning throughput that is not the model's: image preparation per CPU core (decode reduced, bound to max_pixels, JPEG) on the
demo photos, and the openai client's own overhead against a local server that answers at once; with --gpu, the transformers backend on
a random-weight model of Qwen2.5-VL-7B's architecture (needs CUDA; a reference figure next to the post's 20 img/s per H200 with vLLM).

The post's node: 8 GPUs x 20 img/s = 160 img/s. Goals (issue 7): report how many cores keep such a node fed; the client must never
be the bottleneck at 160 img/s.
Usage: python bench/bench_caption.py [--repeat N] [--requests N] [--gpu]
"""
import math, subprocess, sys, time
from common import timed, record, parser
from prx_nb.caption import prepare_image, OpenAICaptioner, CaptionSpec
from prx_nb.demo import gather_photos

NODE_IMG_S = 160

SERVER = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def _send(self, code, body, ctype):
        b = body.encode(); self.send_response(code); self.send_header('Content-Type', ctype); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self): self._send(200, json.dumps(dict(data=[dict(id='instant')])), 'application/json')
    def do_POST(self):
        self.rfile.read(int(self.headers['Content-Length']))
        ev = 'data: ' + json.dumps(dict(choices=[dict(delta=dict(content='A caption of about twenty words that stands in for a real one, returned at once by this server.'), finish_reason='stop')])) + '\n\ndata: [DONE]\n\n'
        self._send(200, ev, 'text/event-stream')
s = ThreadingHTTPServer(('127.0.0.1', 0), H); print(s.server_address[1], flush=True); s.serve_forever()
'''


def prep(files, repeat, max_pixels):
    data = [p.read_bytes() for p in files]
    t, _ = timed(lambda: [prepare_image(d, max_pixels) for d in data], repeat)
    rate = len(data) / t
    return dict(images=len(data), max_pixels=max_pixels, images_per_s_per_core=round(rate, 1), cores_for_160_img_s=math.ceil(NODE_IMG_S / rate))


def client(files, n, concurrency=16):
    srv = subprocess.Popen([sys.executable, '-c', SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(srv.stdout.readline())
        c = OpenAICaptioner(f'http://127.0.0.1:{port}/v1', CaptionSpec('instant'), concurrency=concurrency)
        jpegs = [prepare_image(p.read_bytes())[0] for p in files]
        batch = (jpegs * (n // len(jpegs) + 1))[:n]
        c.caption(batch[:32])  # warm the connection pool
        t = time.perf_counter(); out = c.caption(batch); dt = time.perf_counter() - t
        assert all(r.status == 'ok' for r in out), {r.status for r in out}
        kb = sum(map(len, batch)) / len(batch) / 1024
        return dict(requests=n, concurrency=concurrency, mean_jpeg_kb=round(kb), requests_per_s=round(n / dt), headroom_over_160=round(n / dt / NODE_IMG_S, 1))
    finally: srv.kill()


def gpu(images=32, new_tokens=256):
    import torch
    if not torch.cuda.is_available(): return dict(skipped='no CUDA device here: run with --gpu on a GPU machine')
    from PIL import Image
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, AutoProcessor
    from prx_nb.caption import chat_messages
    from prx_nb.testing import tiny_vlm
    import tempfile, io
    proc = AutoProcessor.from_pretrained(tiny_vlm(tempfile.mkdtemp()))  # tokenizer + chat template; the image processor is widened below
    proc.image_processor.max_pixels = proc.image_processor.size['longest_edge'] = 1024 * 1024
    # Qwen2.5-VL-7B-Instruct's published architecture (text: 28 layers, 3584 wide; vision: 32 blocks, 1280 wide), random weights
    cfg = Qwen2_5_VLConfig(text_config=dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                                            num_key_value_heads=4, rope_scaling={'type': 'mrope', 'mrope_section': [16, 24, 24]}, max_position_embeddings=128000),
                           vision_config=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584, patch_size=14,
                                              spatial_merge_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31]),
                           image_token_id=proc.tokenizer.convert_tokens_to_ids('<|image_pad|>'),
                           vision_start_token_id=proc.tokenizer.convert_tokens_to_ids('<|vision_start|>'))
    with torch.device('cuda'): model = Qwen2_5_VLForConditionalGeneration(cfg).to(torch.bfloat16).eval()
    files = sorted(p for p in gather_photos().glob('*.jpg'))[:images]
    ims = [Image.open(io.BytesIO(prepare_image(p.read_bytes())[0])).convert('RGB') for p in files]
    spec = CaptionSpec('random-Qwen2.5-VL-7B')
    def run(batch):
        prompts = [proc.apply_chat_template(chat_messages(spec, dict(type='image')), add_generation_prompt=True) for _ in batch]
        x = proc(text=prompts, images=batch, padding=True, return_tensors='pt').to('cuda')
        with torch.inference_mode(): model.generate(**x, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    run(ims[:2]); torch.cuda.synchronize()
    t = time.perf_counter()
    for s in range(0, len(ims), 8): run(ims[s:s + 8])
    torch.cuda.synchronize(); dt = time.perf_counter() - t
    return dict(images=len(ims), new_tokens=new_tokens, images_per_s=round(len(ims) / dt, 2), device=torch.cuda.get_device_name(0))


def main(repeat=3, requests=2000, gpu_run=False):
    files = sorted(p for p in gather_photos().iterdir() if p.suffix != '.json')
    res = dict(prepare_1mp=prep(files, repeat, 1024 * 1024), prepare_0_5mp=prep(files, repeat, 512 * 1024), openai_client=client(files, requests))
    p, c = res['prepare_1mp'], res['openai_client']
    print(f"preparation: {p['images_per_s_per_core']} img/s per core at <= 1 MP -> {p['cores_for_160_img_s']} cores keep a 160 img/s node fed")
    print(f"openai client: {c['requests_per_s']} requests/s against an instant local server ({c['headroom_over_160']}x the 160 img/s a node needs)")
    if gpu_run: res['gpu_transformers_qwen2_5_vl_7b_random'] = gpu(); print(res['gpu_transformers_qwen2_5_vl_7b_random'])
    res['goal_met'] = c['requests_per_s'] > NODE_IMG_S
    record('caption', **res)


if __name__ == '__main__':
    ap = parser(__doc__)
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--requests', type=int, default=2000)
    ap.add_argument('--gpu', dest='gpu_run', action='store_true', help='also run the GPU reference (needs CUDA)')
    main(**vars(ap.parse_args()))
