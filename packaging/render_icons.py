"""Render the app icon (an SVG) to what each OS wants, with Qt's SVG renderer only.

    python packaging/render_icons.py app/resources/loadout.svg build/pack/icons

writes ``loadout-<size>.png`` (16...1024), ``loadout.ico`` (Windows: 32-bit bitmaps up to 48 px,
PNG above, as Windows Vista and later read) and ``loadout.icns`` (macOS: PNG entries). Runs in
the build venv (it needs PySide6); set ``QT_QPA_PLATFORM=offscreen`` where there is no screen.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512, 1024)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
#: icns type -> pixel size (the @2x types hold twice the point size)
ICNS_TYPES = (
    ("icp4", 16), ("icp5", 32), ("icp6", 64), ("ic07", 128), ("ic08", 256), ("ic09", 512),
    ("ic10", 1024), ("ic11", 32), ("ic12", 64), ("ic13", 256), ("ic14", 512),
)  # fmt: skip


def render(renderer: QSvgRenderer, size: int) -> QImage:
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    return image


def png_bytes(image: QImage) -> bytes:
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        raise RuntimeError("Qt could not encode a PNG")
    buffer.close()
    return bytes(data.data())


def dib_bytes(image: QImage) -> bytes:
    """An ICO bitmap entry: BITMAPINFOHEADER, BGRA rows bottom-up, an all-clear AND mask."""
    size = image.width()
    argb = image.convertToFormat(QImage.Format.Format_ARGB32)  # little-endian memory order: B, G, R, A
    rows = [bytes(argb.constScanLine(y))[: size * 4] for y in range(size)]
    mask_row = ((size + 31) // 32) * 4
    header = struct.pack("<IiiHHIIiiII", 40, size, size * 2, 1, 32, 0, 0, 0, 0, 0, 0)
    return header + b"".join(reversed(rows)) + bytes(mask_row * size)


def ico(images: dict[int, QImage]) -> bytes:
    entries = [(s, dib_bytes(images[s]) if s <= 48 else png_bytes(images[s])) for s in ICO_SIZES]
    out = struct.pack("<HHH", 0, 1, len(entries))
    offset = 6 + 16 * len(entries)
    for size, data in entries:
        dim = 0 if size >= 256 else size
        out += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(data), offset)
        offset += len(data)
    return out + b"".join(data for _, data in entries)


def icns(images: dict[int, QImage]) -> bytes:
    body = b""
    for kind, size in ICNS_TYPES:
        data = png_bytes(images[size])
        body += kind.encode("ascii") + struct.pack(">I", 8 + len(data)) + data
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main(svg: str, out: str) -> int:
    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(svg)
    if not renderer.isValid():
        print(f"render_icons: {svg} is not a valid SVG", file=sys.stderr)
        return 1
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    images = {size: render(renderer, size) for size in PNG_SIZES}
    for size, image in images.items():
        (folder / f"loadout-{size}.png").write_bytes(png_bytes(image))
    (folder / "loadout.ico").write_bytes(ico(images))
    (folder / "loadout.icns").write_bytes(icns(images))
    print(f"icons: {folder}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
