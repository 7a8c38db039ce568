"""Launch to a first picture with one's own folder and a LoRA, through the real window (offscreen):
the machine's share of the time, and the clicks an artist makes on the way.

The user's steps, each driven through the same window method a click or double-click calls:
  1. Add folder (toolbar or File menu; the folder dialog: 2 more clicks)  -> ``add_folder``
  2. double-click the SD1.5 checkpoint in the library                      -> ``load_entry``
  3. double-click the LoRA in the library (it goes onto the stack at 1.0)  -> ``load_entry``
  4. click the prompt, type it; 5. click Generate (defaults: the family's 512x512, 20 steps)

    PYTHONPATH=$PWD .venv/bin/python -m bench.first_picture [--steps 20] [--size 512]

Prints JSON: seconds from the start of the process to the window shown, to the library read, the
checkpoint loaded, the LoRA applied and the picture saved, and the number of clicks. The folder is
a ComfyUI-style folder with the demo's tiny real SD1.5 checkpoint and LoRA (random weights: the
picture is noise, the timings are the window's and the engine's, not a real model's).
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

CLICKS = {"add folder": 1, "folder dialog": 2, "checkpoint": 1, "lora": 1, "prompt": 1, "generate": 1}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--size", type=int, default=512)
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.backend.monitor import MemoryMonitor
    from app.backend.placement import Placement
    from app.demo import ensure_demo_library
    from app.gui.launch import build_window

    app = QApplication.instance() or QApplication(sys.argv)
    marks: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        setup_begin = time.perf_counter()
        demo = ensure_demo_library(root / "demo")
        models = root / "ComfyUI" / "models"
        (models / "checkpoints").mkdir(parents=True)
        (models / "loras").mkdir(parents=True)
        checkpoint = shutil.copy(demo.checkpoint, models / "checkpoints" / "my-sd15.safetensors")
        lora = shutil.copy(demo.lora, models / "loras" / "my-style.safetensors")
        setup = time.perf_counter() - setup_begin  # making the test folder: not the user's time

        def since_launch() -> float:
            return time.perf_counter() - START - setup

        store = QSettings(str(root / "settings.ini"), QSettings.Format.IniFormat)
        window = build_window(
            store=store, cache_path=None, include_own_folder=False, monitor=MemoryMonitor(None),
            placement=Placement(None), output_folder=root / "pictures",
        )  # fmt: skip
        window.show()
        marks["window shown"] = since_launch()
        backend = window.backend

        def wait(done, timeout: float = 300.0) -> None:  # type: ignore[no-untyped-def]
            end = time.perf_counter() + timeout
            while not done():
                app.processEvents()
                time.sleep(0.005)
                if time.perf_counter() > end:
                    raise TimeoutError("the window did not get there in time")

        window.add_folder(str(root / "ComfyUI"))
        wait(lambda: window.browser.model.index_of(str(lora)).isValid() and not backend.busy)
        marks["library read"] = since_launch()
        window.browser.select_path(Path(checkpoint))
        window.load_entry(window.browser.current_entry())
        wait(lambda: window.generate_panel.available and not backend.busy)
        marks["checkpoint loaded"] = since_launch()
        window.browser.select_path(Path(lora))
        window.load_entry(window.browser.current_entry())
        wait(lambda: bool(window.stack.loras) and not backend.busy)
        marks["lora applied"] = since_launch()
        panel = window.generate_panel
        panel.prompt.setPlainText("a lighthouse on a cliff at dusk")
        panel.steps.setValue(args.steps)
        panel.width_.setValue(args.size)
        panel.height_.setValue(args.size)
        button = panel.generate_button  # in view without scrolling? (a scroll is one more action)
        in_view = button.isVisible() and button.visibleRegion().boundingRect() == button.rect()
        button.click()
        wait(lambda: bool(window.gallery.paths()) and not backend.busy)
        marks["picture saved"] = since_launch()
        window.close()
    result = {
        "seconds_from_start": {k: round(v, 2) for k, v in marks.items()},
        "clicks": sum(CLICKS.values()),
        "clicks_by_step": CLICKS,
        "scrolls": 0 if in_view else 1,
        "steps": args.steps,
        "size": args.size,
        "setup_seconds_not_counted": round(setup, 2),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
