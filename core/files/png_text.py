"""A picture's size and text chunks, read without decoding a pixel.

Dropping a picture on the window (or ``--init``) must never decode a 13000x13000 image to read
its text, nor trust a header that claims 100000x100000 pixels, nor inflate a 64 MB text chunk.
For PNG this is a small chunk reader: it reads IHDR (the size) and the ``tEXt``/``zTXt``/``iTXt``
chunks and seeks past everything else (IDAT), with caps: a text chunk over :data:`MAX_TEXT_BYTES`
(stored or inflated) is skipped and said so, at most :data:`MAX_CHUNKS` chunks are looked at.
Other formats (JPEG, WebP) are opened lazily by Pillow (headers only) with every Pillow error,
decompression-bomb refusals included, turned into :class:`~core.errors.FileFormatError`.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from core.errors import FileAccessError, FileFormatError
from core.files.leases import open_input

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: the largest text chunk read (A1111 parameters are a few KiB; ComfyUI workflows some 100 KiB)
MAX_TEXT_BYTES = 1 << 20
#: chunks looked at before giving up (a real PNG has a few dozen; IDAT split in 8 KiB pieces: thousands)
MAX_CHUNKS = 200_000
_TEXT_TYPES = (b"tEXt", b"zTXt", b"iTXt")


@dataclass
class PictureHeader:
    """What a picture's header says: its size, its text chunks, and what was skipped and why."""

    format: str
    width: int
    height: int
    text: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def _not_an_image(path: Path, why: str) -> FileFormatError:
    return FileFormatError(
        f"{path.name} is not an image Loadout can read",
        why=why,
        fix="Drop a PNG saved by Loadout, A1111, Forge or a similar tool",
        code="not_an_image",
    )


def _inflate(data: bytes) -> bytes | None:
    """zlib data inflated up to the cap; None when it would be larger (a decompression bomb)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, MAX_TEXT_BYTES + 1)
    except zlib.error:
        return None
    return None if len(out) > MAX_TEXT_BYTES or inflater.unconsumed_tail else out


def _text_chunk(kind: bytes, data: bytes) -> tuple[str, str] | None:
    key, sep, rest = data.partition(b"\0")
    if not sep or not key:
        return None
    keyword = key.decode("latin-1")
    if kind == b"tEXt":
        return keyword, rest.decode("latin-1")
    if kind == b"zTXt":
        raw = _inflate(rest[1:]) if rest[:1] == b"\0" else None
        return (keyword, raw.decode("latin-1")) if raw is not None else None
    if len(rest) < 2:  # iTXt: flag, method, language\0, translated keyword\0, text
        return None
    compressed, body = rest[0], rest[2:]
    parts = body.split(b"\0", 2)
    if len(parts) != 3:
        return None
    raw = _inflate(parts[2]) if compressed else parts[2]
    return (keyword, raw.decode("utf-8", "replace")) if raw is not None else None


def _read_png(path: Path, fh: BinaryIO) -> PictureHeader:
    header = PictureHeader("PNG", 0, 0)
    for _ in range(MAX_CHUNKS):
        head = fh.read(8)
        if len(head) < 8:
            break  # a file cut after its pixels: what was read stands
        length, kind = struct.unpack(">I4s", head)
        if length > 0x7FFFFFFF:
            raise _not_an_image(path, f"a chunk claims {length} bytes, more than PNG allows")
        if kind == b"IHDR":
            data = fh.read(min(length, 13))
            if len(data) < 8:
                raise _not_an_image(path, "its IHDR chunk is cut short")
            header.width, header.height = struct.unpack(">II", data[:8])
            fh.seek(length - len(data) + 4, 1)
        elif kind in _TEXT_TYPES and length > MAX_TEXT_BYTES:
            header.skipped.append(f"a text chunk of {length / (1 << 20):.1f} MiB (over the 1 MiB limit)")
            fh.seek(length + 4, 1)
        elif kind in _TEXT_TYPES:
            data = fh.read(length)
            fh.seek(4, 1)
            found = _text_chunk(kind, data)
            if found is None:
                header.skipped.append(f"a damaged or oversized {kind.decode()} chunk")
            else:
                header.text.setdefault(found[0], found[1])
        elif kind == b"IEND":
            break
        else:
            fh.seek(length + 4, 1)  # pixels and everything else: never read
    else:
        header.skipped.append(f"chunks after the first {MAX_CHUNKS}")
    if header.width == 0 or header.height == 0:
        raise _not_an_image(path, "it has no valid IHDR chunk (no size)")
    return header


def _read_other(path: Path) -> PictureHeader:
    from PIL import Image

    try:
        with Image.open(path) as im:  # lazy: reads the header, decodes nothing
            info = {k: v for k, v in im.info.items() if isinstance(k, str)}
            text = {k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v for k, v in info.items()}
            return PictureHeader(
                str(im.format), im.width, im.height, {k: v for k, v in text.items() if isinstance(v, str)}
            )
    except FileNotFoundError:
        raise
    except Exception as exc:  # Pillow raises many kinds (DecompressionBombError, SyntaxError, ValueError)
        raise _not_an_image(path, str(exc) or "its bytes are not a PNG, JPEG or WebP picture") from None


def read_picture_header(path: str | Path) -> PictureHeader:
    """The picture's size and text, without decoding pixels (see the module notes)."""
    path = Path(path)
    try:
        with open_input(path) as fh:
            if fh.read(8) == PNG_SIGNATURE:
                return _read_png(path, fh)
        return _read_other(path)
    except FileNotFoundError:
        raise FileAccessError(f"{path} does not exist", fix="Check the path", code="not_found") from None
    except IsADirectoryError:
        raise _not_an_image(path, "it is a folder") from None
    except OSError as exc:
        raise FileAccessError(
            f"cannot read {path}", why=exc.strerror or str(exc), fix="Check the file", code="file_access"
        ) from None
