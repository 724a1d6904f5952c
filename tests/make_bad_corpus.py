"""Regenerate tests/data/bad: one file per kind of bad input, named STATUS__description.ext (the expected status first)."""
import struct, zlib
from pathlib import Path
from prx_nb.core import with_orientation
from prx_nb.testing import tiny_image

def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))

def bomb_png(w: int, h: int) -> bytes:
    "A tiny PNG whose header declares w x h pixels (its data is a few bytes)."
    ihdr = struct.pack('>IIBBBBB', w, h, 8, 0, 0, 0, 0)
    return b'\x89PNG\r\n\x1a\n' + png_chunk(b'IHDR', ihdr) + png_chunk(b'IDAT', zlib.compress(b'\x00' * 16)) + png_chunk(b'IEND', b'')

def main(out=Path(__file__).parent / 'data' / 'bad'):
    out.mkdir(parents=True, exist_ok=True)
    jpg, png = tiny_image(400, 300, quality=90), tiny_image(400, 300, 'PNG')
    files = {
        'empty__zero_bytes.jpg': b'',
        'not_image__text_file.jpg': b'This is a caption file saved with the wrong extension.\n',
        'not_image__html_error_page.png': b'<html><head><title>404 Not Found</title></head></html>',
        'not_image__pdf.jpg': b'%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << >>\n%%EOF\n',
        'truncated__half_jpeg.jpg': jpg[:len(jpg) // 2],
        'truncated__png_without_iend.png': png[:-12],
        'truncated__gif_without_trailer.gif': tiny_image(64, 64, 'GIF')[:-1],
        'corrupt__jpeg_bad_header.jpg': b'\xff\xd8\xff\xe0' + b'\x13' * 300,
        'corrupt__png_bad_ihdr.png': b'\x89PNG\r\n\x1a\n' + b'\x00\x00\x00\x0dIHDR' + b'\xff' * 40,
        'too_many_pixels__bomb_100k_x_100k.png': bomb_png(100_000, 100_000),
        'unsupported_mode__lab.tif': tiny_image(32, 32, 'TIFF', mode='LAB'),
        'unsupported_format__icon.ico': tiny_image(32, 32, 'ICO'),
        'ok__cmyk.jpg': tiny_image(400, 300, 'JPEG', mode='CMYK'),
        'ok__rgba.png': tiny_image(400, 300, 'PNG', mode='RGBA'),
        'ok__palette.gif': tiny_image(400, 300, 'GIF'),
        'ok__grey16.png': tiny_image(400, 300, 'PNG', mode='I;16'),
        'ok__exif_rotated_300x400.jpg': with_orientation(jpg, 6),
        'ok__webp.webp': tiny_image(400, 300, 'WEBP'),
        'ok__trailing_bytes_after_eoi.jpg': jpg + b'\x00' * 64,
    }
    for name, data in files.items(): (out / name).write_bytes(data)
    return out

if __name__ == '__main__': print(main())
