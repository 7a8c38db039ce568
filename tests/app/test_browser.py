"""The model browser on a folder of real-layout files: live fill-in, tree, search/filter/sort, details."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtGui import QKeySequence

from app.backend.monitor import MemoryMonitor
from app.gui.settings import AppSettings
from core.library import Entry
from core.memory.probes import FakeProbe
from tests.app.conftest import LORA_COUNT
from tests.app.util import strict

GIB = 1024**3


def _count_only(group_label: str) -> str:
    """``"loras  (241 · 1.2 MB)"`` -> ``"loras  (241)"`` (the bytes are tested on their own)."""
    return re.sub(r" · [^)]*\)", ")", group_label)


def _column_texts(window, path: Path) -> list[str]:
    model = window.browser.model
    index = model.index_of(str(path))
    assert index.isValid(), f"{path.name} is not shown"
    return [model.data(index.siblingAtColumn(c)) for c in range(model.columnCount())]


def test_browser_indexes_a_comfyui_folder_live_and_shows_each_file(
    qtbot, make_window, real_layout_folder: Path, store: QSettings
) -> None:
    window = make_window()
    assert not window.browser.tree.isVisible() and window.browser.empty.isVisible()  # no folders: empty state
    delivered: list[Entry] = []
    window.backend.entries_found.connect(delivered.extend)
    with strict(qtbot, window.backend, "started", "scan_done", "finished"):
        window.add_folder(str(real_layout_folder))  # what Ctrl+O does after the folder dialog
    assert AppSettings.load(store).folders == (str(real_layout_folder),)  # persisted

    # every file came first as a listed (pending) row, then filled in from its header
    seen: dict[str, list[str]] = {}
    for e in delivered:
        seen.setdefault(str(e.path), []).append(e.status)
    assert len(seen) == LORA_COUNT + 4
    assert all(statuses[0] == "pending" and statuses[-1] != "pending" for statuses in seen.values())

    m = real_layout_folder / "models"
    sdxl, flux = m / "checkpoints/sd_xl_base_1.0.safetensors", m / "diffusion_models/flux1-dev.safetensors"
    narrow = window.browser.model.short_names  # the Create dock leaves ".safetensors" off
    assert _column_texts(window, sdxl) == [
        "sd_xl_base_1.0" if narrow else "sd_xl_base_1.0.safetensors",
        "sdxl",
        "checkpoint",
        "6.9 GB",
        "fp16",
        None,  # no other copy
        "never",  # never loaded
    ]
    assert _column_texts(window, flux)[1:3] == ["flux-dev", "diffusion model"]
    assert _column_texts(window, m / "loras/watercolor-sd15.safetensors")[1:3] == ["sd1", "LoRA"]
    assert _column_texts(window, m / "checkpoints/half-download.safetensors")[1] == "error"
    model = window.browser.model
    groups = [_count_only(model.data(i)) for i in model.group_indexes()]
    assert groups == [
        "checkpoints  (2)",
        "diffusion_models  (1)",
        "loras  (1)",
        f"loras/many  ({LORA_COUNT})",
    ]
    assert "1 unreadable" in window.browser.summary.text()

    # details: components, trigger words, a fit estimate; an unreadable file's error inline
    assert window.browser.select_path(sdxl)
    body = window.details.body.toPlainText()
    assert "clip-g" in body and "diffusion model" in body and "Components" in body
    assert (
        window.details.fit.verdict.text() in ("Fits", "Does not fit")
        and window.details.load_button.isEnabled()
    )
    assert window.browser.select_path(m / "loras/watercolor-sd15.safetensors")
    assert "watercolor" in window.details.body.toPlainText()
    assert not window.details.lora_button.isEnabled()  # no model loaded yet
    assert window.browser.select_path(m / "checkpoints/half-download.safetensors")
    assert (
        "Cannot be read" in window.details.body.toPlainText() and not window.details.load_button.isEnabled()
    )

    # search, filters, grouping and sort
    b = window.browser
    b.search.setText("watercolor")
    assert model.shown_count() == 1
    b.search.setText("")
    b.kind_filter.setCurrentIndex(b.kind_filter.findData("lora"))
    assert model.shown_count() == LORA_COUNT + 1
    b.kind_filter.setCurrentIndex(0)
    b.family_filter.setCurrentIndex(b.family_filter.findData("flux-dev"))
    assert model.shown_count() == 1
    b.family_filter.setCurrentIndex(0)
    b.grouping.setCurrentIndex(b.grouping.findData("kind"))
    assert [_count_only(model.data(i)) for i in model.group_indexes()][:3] == [
        "Checkpoints  (1)", "Diffusion models  (1)", f"LoRAs  ({LORA_COUNT + 1})",
    ]  # fmt: skip
    b.sort.setCurrentIndex(b.sort.findData("size"))
    b.descending.setChecked(True)
    first_checkpoint = model.entry(model.index(0, 0, model.index(0, 0)))
    assert first_checkpoint is not None and first_checkpoint.name == "sd_xl_base_1.0.safetensors"

    # F5 rescans (the index reuses what it read; nothing is lost)
    with strict(qtbot, window.backend, "started", "scan_done", "finished"):
        window.rescan_action.trigger()
    assert len(model.entries()) == LORA_COUNT + 4


def test_shortcuts_are_bound(make_window) -> None:
    window = make_window()
    bound = {a.text(): a.shortcut() for a in window.actions()}
    expected = {"Add folder": "Ctrl+O", "Load": "Ctrl+L", "Search": "Ctrl+F", "Rescan": "F5", "Stop": "Esc"}
    for text, keys in expected.items():
        assert bound[text] == QKeySequence(keys), text
    window.search_action.trigger()
    assert window.browser.search.hasFocus() or window.focusWidget() is window.browser.search


def test_fit_estimate_on_a_simulated_8_gib_card(qtbot, make_window, real_layout_folder: Path) -> None:
    window = make_window(real_layout_folder, monitor=MemoryMonitor(FakeProbe(8 * GIB)))
    flux = real_layout_folder / "models/diffusion_models/flux1-dev.safetensors"
    qtbot.waitUntil(lambda: window.browser.model.index_of(str(flux)).isValid(), timeout=20000)
    qtbot.waitUntil(lambda: not window.backend.busy, timeout=20000)
    fit = window.details.fit
    window.browser.select_path(real_layout_folder / "models/checkpoints/sd_xl_base_1.0.safetensors")
    assert fit.verdict.text() == "Fits" and "Simulated GPU" in fit.text.text()
    window.browser.select_path(flux)
    assert fit.verdict.text() in ("Partially", "Does not fit")  # 23.8 GB of bf16 on an 8 GiB card
    fit.dtype.setCurrentIndex(fit.dtype.findData("fp8_e4m3fn"))
    assert fit.estimate is not None and fit.estimate.total < 12.5e9
    assert "No GPU found" not in fit.where.text()
    assert window.memory_panel.note.text().startswith("GPU: Simulated GPU")
