"""Launch to a first picture with one's own folder and a LoRA, on the real window (offscreen): the
clicks, scrolls and typing an artist does (real mouse and key events, bench/artist.py) and the
seconds it takes.

The artist's steps, from a fresh home holding ``~/ComfyUI`` (an SD1.5 checkpoint and a LoRA):
  1. add the folder: the empty library's "Add ~/ComfyUI" (1 click; ``--route found``, the default),
     or Add folder, then ComfyUI and Choose in the folder dialog (3 clicks; ``--route dialog``)
  2. double-click the checkpoint in the library; 3. double-click the LoRA (onto the stack at 1.0)
  4. click the prompt, type it; 5. click Generate
A target not in view is scrolled to first, and the scroll counted.

    PYTHONPATH=$PWD .venv/bin/python -m bench.first_picture [--steps 20] [--size 512] [--route dialog]

Prints JSON: seconds from the process start to the window shown, then from the first click to the
library read, the checkpoint loaded, the LoRA applied and the picture saved; the clicks (a
double-click counts one), scrolls and typed characters, and each step. The checkpoint and LoRA
are the demo's tiny real files under other names (random weights: the picture is noise, the
timings are the window's and the engine's, not a real model's).
"""

from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402


def comfyui_marks(install: Path) -> None:
    """What makes a folder a ComfyUI clone to the library (its ``comfy`` package and
    ``folder_paths.py``; empty here)."""
    (install / "comfy").mkdir(parents=True, exist_ok=True)
    (install / "folder_paths.py").touch()


def add_folder(window, artist, route: str) -> None:  # type: ignore[no-untyped-def]
    """The artist adds ``~/ComfyUI``: one click on the empty library's offer, or the folder dialog."""
    if route == "found":
        offer = next(b for b in window.browser.empty.buttons if b.text() == "Add ~/ComfyUI")
        artist.click(offer, "Add ~/ComfyUI")
    else:
        artist.in_folder_dialog("ComfyUI")
        artist.click(window.toolbar.widgetForAction(window.add_folder_action), "Add folder")


def first_picture(  # type: ignore[no-untyped-def]
    window, home: Path, prompt: str, wait, *, steps: int, size: int, route: str = "found"
):
    """Drive ``window`` as a new artist does, with real mouse and key events: add ``home/ComfyUI``
    (``route`` "found": the empty library's "Add ~/ComfyUI"; "dialog": Add folder, then
    ComfyUI and Choose in the folder dialog), double-click the checkpoint, double-click the LoRA,
    click the prompt and type ``prompt``, click Generate. ``wait(done, timeout)`` runs the event
    loop until ``done()``. Returns the :class:`Artist` (the counts) and the seconds from the first
    click to each mark. The steps and size are the bench's (set without counting: a real model's
    defaults would take minutes on a CPU)."""
    from bench.artist import Artist

    artist = Artist()
    marks: dict[str, float] = {}
    begin = time.perf_counter()
    backend, browser, panel = window.backend, window.browser, window.generate_panel
    models = home / "ComfyUI" / "models"
    checkpoint = next((models / "checkpoints").glob("*.safetensors"))
    lora = next((models / "loras").glob("*.safetensors"))
    artist.look()
    add_folder(window, artist, route)
    wait(lambda: browser.model.index_of(str(lora)).isValid() and not backend.busy)
    marks["library read"] = time.perf_counter() - begin
    artist.double_click_row(browser.tree, browser.model.index_of(str(checkpoint)), "the checkpoint")
    wait(lambda: panel.available and not backend.busy)
    marks["checkpoint loaded"] = time.perf_counter() - begin
    artist.double_click_row(browser.tree, browser.model.index_of(str(lora)), "the LoRA")
    wait(lambda: bool(window.stack.loras) and not backend.busy)
    marks["lora applied"] = time.perf_counter() - begin
    panel.steps.setValue(steps)
    panel.width_.setValue(size)
    panel.height_.setValue(size)
    artist.click(panel.prompt, "the prompt")
    artist.type(panel.prompt, prompt, "the prompt")
    artist.click(panel.generate_button, "Generate")
    wait(lambda: bool(window.gallery.paths()) and not backend.busy, 900.0)
    marks["picture saved"] = time.perf_counter() - begin
    return artist, marks


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--route", choices=("found", "dialog"), default="found")
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.backend.monitor import MemoryMonitor
    from app.backend.placement import Placement
    from app.demo import ensure_demo_library
    from app.gui.launch import build_window

    app = QApplication.instance() or QApplication(sys.argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        setup_begin = time.perf_counter()
        demo = ensure_demo_library(root / "demo")
        home = root / "home"
        models = home / "ComfyUI" / "models"
        (models / "checkpoints").mkdir(parents=True)
        (models / "loras").mkdir(parents=True)
        shutil.copy(demo.checkpoint, models / "checkpoints" / "my-sd15.safetensors")
        shutil.copy(demo.lora, models / "loras" / "my-style.safetensors")
        comfyui_marks(home / "ComfyUI")
        os.environ["HOME"] = str(home)  # the folder dialog opens there
        setup = time.perf_counter() - setup_begin  # making the test folder: not the user's time

        store = QSettings(str(root / "settings.ini"), QSettings.Format.IniFormat)
        window = build_window(
            store=store, cache_path=None, include_own_folder=False, monitor=MemoryMonitor(None),
            placement=Placement(None), output_folder=root / "pictures",
        )  # fmt: skip
        window.show()
        shown = time.perf_counter() - START - setup

        def wait(done, timeout: float = 300.0) -> None:  # type: ignore[no-untyped-def]
            end = time.perf_counter() + timeout
            while not done():
                app.processEvents()
                time.sleep(0.005)
                if time.perf_counter() > end:
                    raise TimeoutError("the window did not get there in time")

        wait(lambda: window.isVisible() and not window.backend.busy)
        artist, marks = first_picture(window, home, "a lighthouse on a cliff at dusk", wait,
                                      steps=args.steps, size=args.size, route=args.route)  # fmt: skip
        window.close()
    result = {
        "seconds_to_window_shown": round(shown, 2),
        "seconds_from_the_first_click": {k: round(v, 2) for k, v in marks.items()},
        **artist.summary(),
        "route": args.route,
        "steps": args.steps,
        "size": args.size,
        "setup_seconds_not_counted": round(setup, 2),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
