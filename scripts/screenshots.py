"""Screenshots of the window for docs/screenshots/, taken under a real X server (Xvfb) with a window
manager (openbox) and the app's own screenshot path (``loadout --demo --screenshot``), of the whole
screen (the window's frame included: it shows whether the window fits): at 1366 x 768 (100 %),
1920 x 1080 at 150 % (1280 x 720 logical) and 2560 x 1440 (100 %), each

- ``first-<size>.png``: the first launch (a fresh home: no saved size or layout), the demo library
  read, nothing loaded;
- ``demo-<size>.png``: after a picture (the demo flow: load, LoRA, Load to GPU on a simulated card,
  generate);
- ``library-<size>.png``: after a picture, with a small real-layout ComfyUI-style folder listed
  (tiny real files, sparse full-size headers and three broken files; the longest name selected).

The window is not resized: it opens as a first launch does on that screen.

    PYTHONPATH=$PWD .venv/bin/python scripts/screenshots.py [--out docs/screenshots] [--display 11]

The PNGs are quantized to 256 colours so each stays small (< 400 KB).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = (  # name, screen, QT_SCALE_FACTOR
    ("1366x768", "1366x768", "1"),
    ("1920x1080-150", "1920x1080", "1.5"),
    ("2560x1440", "2560x1440", "1"),
)


def build_folder(root: Path) -> Path:
    """``root/models/...``: the demo's tiny real SD1.5 checkpoint and LoRA under user-like names,
    sparse real-layout SDXL and Flux files, and three broken files."""
    sys.path.insert(0, str(ROOT))
    from app.demo import ensure_demo_library
    from tests.fixtures.layouts_diffusion import flux, sdxl_checkpoint
    from tests.fixtures.st_files import write_sparse

    demo = ensure_demo_library(root / "demo")
    m = root / "ComfyUI" / "models"
    for sub in ("checkpoints", "loras", "diffusion_models", "vae"):
        (m / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy(demo.checkpoint, m / "checkpoints" / "dreamy-sd15-tiny.safetensors")
    shutil.copy(demo.lora, m / "loras" / "inkwash-style-sd15.safetensors")
    write_sparse(m / "checkpoints" / "sd_xl_base_1.0.safetensors", sdxl_checkpoint())
    write_sparse(m / "diffusion_models" / "flux1-dev.safetensors", flux("dev"), dtype="BF16")
    data = (m / "checkpoints" / "dreamy-sd15-tiny.safetensors").read_bytes()
    (m / "checkpoints" / "truncated_download.safetensors").write_bytes(data[: len(data) // 3])
    (m / "loras" / "empty.safetensors").write_bytes(b"")
    (m / "vae" / "not-a-model.safetensors").write_bytes(b"<html>404 Not Found</html>")
    return root / "ComfyUI"


def shoot(display: int, screen: str, scale: str, out: Path, folder: Path | None, first: bool) -> None:
    xvfb = subprocess.Popen(["Xvfb", f":{display}", "-screen", "0", f"{screen}x24", "-nolisten", "tcp"])
    wm = None
    try:
        time.sleep(1.0)
        env = dict(os.environ, DISPLAY=f":{display}", QT_SCALE_FACTOR=scale, QT_QPA_PLATFORM="xcb")
        wm = subprocess.Popen(["openbox"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        with tempfile.TemporaryDirectory() as home:
            env.update(HOME=home, XDG_DATA_HOME=f"{home}/data", XDG_CONFIG_HOME=f"{home}/config",
                       XDG_CACHE_HOME=f"{home}/cache")  # fmt: skip
            cmd = [sys.executable, "-m", "app.cli", "--demo", "--screenshot", str(out)]
            if first:
                cmd.append("--first-launch")
            if folder is not None:
                cmd += ["--folder", str(folder)]
            subprocess.run(cmd, cwd=ROOT, env=env, check=True, timeout=300)
    finally:
        if wm is not None:
            wm.terminate()
            wm.wait()
        xvfb.terminate()
        xvfb.wait()
    small(out)


def small(path: Path) -> None:
    """256 colours, no dithering: a screenshot of flat panels loses nothing visible."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage

    _app = QGuiApplication.instance() or QGuiApplication(["x", "-platform", "offscreen"])
    image = QImage(str(path))
    flags = Qt.ImageConversionFlag.ThresholdDither | Qt.ImageConversionFlag.AvoidDither
    image.convertToFormat(QImage.Format.Format_Indexed8, flags).save(str(path), "PNG", 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--display", type=int, default=31)
    parser.add_argument("--only", help="one size: 1366x768, 1920x1080-150 or 2560x1440")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_folder(Path(tmp))
        for i, (name, screen, scale) in enumerate(SIZES):
            if args.only and name != args.only:
                continue
            shots = (("first", None, True), ("demo", None, False), ("library", folder, False))
            for suffix, extra, first in shots:
                out = args.out / f"{suffix}-{name}.png"
                shoot(args.display + i, screen, scale, out, extra, first)
                print(f"{out}: {out.stat().st_size // 1024} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
