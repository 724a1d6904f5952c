"""Write img2dataset's three output layouts with img2dataset itself, downloading from a local HTTP server.

Run by img2dataset's own environment (tests/.producers/img2dataset: img2dataset 1.47, whose pins clash with
prx_nb's): `python img2dataset_layouts.py OUT PHOTO...`. Serves the photos (and a missing file, for a 404) on
127.0.0.1, downloads a url list of them with the img2dataset command as `files`, `webdataset` and `parquet` output, and writes OUT/layouts.json
like hf_layouts.py does (the failed url is an expected row with img2dataset's own error message)."""
import json, os, shutil, socket, subprocess, sys, time
from pathlib import Path
os.environ['NO_ALBUMENTATIONS_UPDATE'] = '1'  # no update check over the network
import csv

out, photos = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
www = out / 'www'; www.mkdir(parents=True, exist_ok=True)
for i, p in enumerate(photos): shutil.copy(p, www / f'p{i}{p.suffix.lower()}')
with socket.socket() as s: s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]
server = subprocess.Popen([sys.executable, '-m', 'http.server', str(port), '--bind', '127.0.0.1', '-d', str(www)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(100):
        try: socket.create_connection(('127.0.0.1', port), timeout=0.2).close(); break
        except OSError: time.sleep(0.05)
    base = f'http://127.0.0.1:{port}'
    names = sorted(p.name for p in www.iterdir())
    urls = [f'{base}/{n}' for n in names] + [f'{base}/missing.jpg']
    caps = [f'img2dataset caption {i}' for i in range(len(urls))]
    with open(out / 'urls.csv', 'w', newline='') as f: csv.writer(f).writerows([('url', 'caption'), *zip(urls, caps)])
    layouts = {}
    for fmt, folder, kind in [('files', 'i2d_files', 'folder'), ('webdataset', 'i2d_wds', 'wds'), ('parquet', 'i2d_parquet', 'parquet')]:
        subprocess.run([str(Path(sys.executable).parent / 'img2dataset'), '--url_list', str(out / 'urls.csv'),
                        '--input_format', 'csv', '--url_col', 'url', '--caption_col', 'caption', '--output_format', fmt,
                        '--output_folder', str(out / folder), '--processes_count', '1', '--thread_count', '4',
                        '--resize_mode', 'no', '--retries', '0', '--timeout', '5', '--enable_wandb', 'False'],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        layouts[f'img2dataset_{fmt}'] = dict(spec=f'{kind}:{folder}', n=len(names), captions=caps[:len(names)],
                                             failed=dict(caption=caps[-1]) if fmt == 'parquet' else None)
finally: server.terminate()
(out / 'layouts.json').write_text(json.dumps(layouts, indent=1))
print(json.dumps({k: v['spec'] for k, v in layouts.items()}))
