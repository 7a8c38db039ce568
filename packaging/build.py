"""Build the frozen one-folder Loadout app (PyInstaller) and, on Linux, its tarball.

Run from anywhere with any Python 3.11+ (it only needs the standard library itself)::

    python3 packaging/build.py                  # venv + icons + PyInstaller + platform package
    python3 packaging/build.py --torch-index https://download.pytorch.org/whl/cu128   # CUDA torch
    python3 packaging/build.py --torch-index https://download.pytorch.org/whl/cpu --flavor cpu
    python3 packaging/build.py --reuse-venv     # keep build/pack-venv's packages, reinstall the app only

Steps:

1. a build venv of its own (``build/pack-venv``; the dev ``.venv`` is never touched) with
   ``pip install -c constraints.txt . pyinstaller``: the app as a wheel would install it, so the
   frozen app gets exactly the files the wheel ships (``app/resources`` included);
2. the app icon rendered from ``app/resources/loadout.svg`` with Qt's SVG renderer into
   ``build/pack/icons`` (PNG sizes, a Windows ``.ico`` and a macOS ``.icns``);
3. PyInstaller with ``packaging/loadout.spec`` into ``dist/`` (``dist/Loadout/`` on Linux and
   Windows, ``dist/Loadout.app`` on macOS);
4. on Linux the desktop-entry files next to the binary and
   ``dist/Loadout-<version>-linux-<arch>[-<flavor>].tar.gz``.

The Windows installer (Inno Setup) and the macOS disk image are made from the result by
``packaging/windows/loadout.iss`` and ``packaging/macos/make_dmg.sh``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging"
VENV = ROOT / "build" / "pack-venv"
ICONS = ROOT / "build" / "pack" / "icons"
DIST = ROOT / "dist"
WORK = ROOT / "build" / "pyinstaller"
#: PyInstaller 6 lays out one-folder apps as binary + ``_internal/``; 7 may change it: pinned below 7.
PYINSTALLER = "pyinstaller>=6.10,<7"
OPEN_CLIP = "open_clip_torch==3.3.0"
DASHSCOPE = "dashscope==2.0.2"  # Qwen's tokenizer vocabulary file (installed without its deps)
SPANDREL = "spandrel==0.4.2"  # upscale models; --no-deps: it names torchvision (core/upscale/arches.py)
LINUX_EXTRAS = ("loadout.desktop", "install-desktop-entry.sh", "uninstall-desktop-entry.sh", "README.txt")


def version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return str(tomllib.load(fh)["project"]["version"])


def venv_python() -> Path:
    if os.name == "nt":
        return VENV / "Scripts" / "python.exe"
    return VENV / "bin" / "python"


def run(cmd: list[str | Path], **kwargs: object) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kwargs)  # type: ignore[call-overload]


def make_venv(torch_index: str | None) -> None:
    if not venv_python().exists():
        run([sys.executable, "-m", "venv", VENV])
    py = venv_python()
    run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"])
    if torch_index:
        # e.g. the CUDA build for Windows; the version is still the one constraints.txt pins
        run([py, "-m", "pip", "install", "-c", "constraints.txt", "torch", "--index-url", torch_index])
    # a plain (non-editable) install, rebuilt from the tree on every run: the frozen app holds
    # exactly what a wheel ships
    run([py, "-m", "pip", "install", "-c", "constraints.txt", ".", PYINSTALLER])
    # CLIP's vocabulary file (core/text/vocab.py); --no-deps: its torchvision cannot sit beside our torch
    run([py, "-m", "pip", "install", "--no-deps", OPEN_CLIP, SPANDREL, DASHSCOPE])


def reinstall_app() -> None:
    """Only the app itself, from the tree as it is now (its dependencies stay as they are)."""
    run([venv_python(), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", "."])


def render_icons() -> None:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    run([venv_python(), PACKAGING / "render_icons.py", ROOT / "app/resources/loadout.svg", ICONS], env=env)


def pyinstaller() -> None:
    target = DIST / ("Loadout.app" if sys.platform == "darwin" else "Loadout")
    shutil.rmtree(target, ignore_errors=True)
    run(
        [venv_python(), "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN",
         "--distpath", DIST, "--workpath", WORK, PACKAGING / "loadout.spec"]
    )  # fmt: skip


def linux_package(flavor: str | None) -> Path:
    """Desktop-entry files next to the binary, then the whole folder as a tarball."""
    folder = DIST / "Loadout"
    for name in LINUX_EXTRAS:
        shutil.copy2(PACKAGING / "linux" / name, folder / name)
    for name in ("install-desktop-entry.sh", "uninstall-desktop-entry.sh"):
        (folder / name).chmod(0o755)
    shutil.copy2(ICONS / "loadout-256.png", folder / "loadout.png")
    arch = platform.machine().lower() or "x86_64"
    tarball = DIST / f"Loadout-{version()}-linux-{arch}{'-' + flavor if flavor else ''}.tar.gz"
    with tarfile.open(tarball, "w:gz", compresslevel=6) as tar:
        tar.add(folder, arcname=f"Loadout-{version()}")
    return tarball


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--torch-index", help="install torch from this index first (e.g. a CUDA build)")
    parser.add_argument(
        "--reuse-venv", action="store_true", help="keep build/pack-venv's packages; reinstall only the app"
    )
    parser.add_argument("--no-package", action="store_true", help="stop after PyInstaller (no tarball)")
    parser.add_argument("--flavor", help="a tag for the tarball's name, e.g. cpu or cuda")
    args = parser.parse_args()
    start = time.monotonic()
    if args.reuse_venv and venv_python().exists():
        reinstall_app()
    else:
        make_venv(args.torch_index)
    render_icons()
    pyinstaller()
    if sys.platform.startswith("linux") and not args.no_package:
        print(f"tarball: {linux_package(args.flavor)}")
    print(f"built in {time.monotonic() - start:.0f} s: {DIST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
