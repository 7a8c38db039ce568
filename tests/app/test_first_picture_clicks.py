"""Launch to a first picture with one's own folder and a LoRA, counted on the real window: a new
artist (a fresh home holding a ComfyUI folder with an SD1.5 checkpoint and a LoRA) adds the folder,
loads the checkpoint, puts the LoRA on the stack, writes a prompt and clicks Generate — every step a
real mouse or key event on the widget a person would use (bench/artist.py), scrolling counted when
a target is not in view. Issue 30's starting point was 8 clicks and 2 scrolls."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.demo import DemoLibrary
from bench.artist import Artist
from bench.first_picture import add_folder, comfyui_marks, first_picture


@pytest.fixture
def home(tmp_path: Path, demo_library: DemoLibrary, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    models = home / "ComfyUI" / "models"
    (models / "checkpoints").mkdir(parents=True)
    (models / "loras").mkdir(parents=True)
    shutil.copy(demo_library.checkpoint, models / "checkpoints" / "my-sd15.safetensors")
    shutil.copy(demo_library.lora, models / "loras" / "my-style.safetensors")
    comfyui_marks(home / "ComfyUI")
    monkeypatch.setenv("HOME", str(home))
    return home


def test_a_first_picture_from_ones_own_folder_takes_5_clicks_and_no_scroll(
    qtbot, make_window, home: Path
) -> None:
    window = make_window()
    window.resize(1366, 768 - 60)  # a laptop's screen less the title bar and a taskbar
    window.layout_.arrange()
    qtbot.waitExposed(window)

    def wait(done, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
        qtbot.waitUntil(done, timeout=int(timeout * 1000))

    artist, marks = first_picture(window, home, "a lighthouse on a cliff at dusk", wait, steps=2, size=64)
    assert artist.steps == [
        "click Add ~/ComfyUI", "double-click the checkpoint", "double-click the LoRA", "click the prompt",
        "type the prompt", "click Generate",
    ]  # fmt: skip
    assert (artist.clicks + artist.double_clicks, artist.scrolls) == (5, 0)
    assert [m for m in marks] == ["library read", "checkpoint loaded", "lora applied", "picture saved"]
    assert window.stack.loras and window.stack.loras[0].path.name == "my-style.safetensors"
    picture = window.gallery.paths()[0]
    assert picture.is_file() and window.picture.view.path == picture
    assert window.generate_panel.prompt.toPlainText() == "a lighthouse on a cliff at dusk"


def test_the_library_offers_installs_in_the_usual_places_and_another_folder_takes_the_dialog(
    qtbot, make_window, home: Path
) -> None:
    """Only installs are offered (not any folder with models in it); a folder elsewhere is Add
    folder, then the folder in the dialog (opened in the home folder) and Choose: 3 clicks."""
    (home / "stable-diffusion-webui" / "models" / "Stable-diffusion").mkdir(parents=True)
    (home / "Pictures" / "models" / "checkpoints").mkdir(parents=True)  # not an install
    window = make_window()
    qtbot.waitUntil(lambda: window.browser.empty.isVisible())
    offers = [b.text() for b in window.browser.empty.buttons]
    assert offers == ["Add ~/ComfyUI", "Add ~/stable-diffusion-webui"]
    artist = Artist()
    add_folder(window, artist, "dialog")
    lora = home / "ComfyUI/models/loras/my-style.safetensors"
    qtbot.waitUntil(lambda: window.browser.model.index_of(str(lora)).isValid(), timeout=30000)
    assert artist.steps == ["click Add folder", "click ComfyUI in the folder dialog", "click Choose"]
    assert window.settings.folders == (str(home / "ComfyUI"),)
