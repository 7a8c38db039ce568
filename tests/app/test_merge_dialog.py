"""File > Merge models…: the dialog offers the library's checkpoints, turns its fields into a
recipe, and the backend merges on its worker through the session's placement (a file written, its
recipe in the metadata, the inputs' hashes from the library)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from safetensors import safe_open

from app.backend.backend import Backend
from app.gui.merge_dialog import MergeDialog
from core.merging.merge import MergeResult
from core.merging.recipe import MergeMethod, MergeRecipe, read_recipe
from core.session import Session
from tests.core.merging.util import checkpoints


@pytest.fixture
def backend(qtbot) -> Iterator[Backend]:  # type: ignore[no-untyped-def]
    b = Backend(Session())
    yield b
    assert b.shutdown(), "the worker thread did not end"


def test_the_dialog_makes_the_recipe_and_the_backend_merges(qtbot, backend: Backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "models"
    a, b, c = checkpoints(folder, "sd1", 3, unet_only=True)
    (folder / "notes.txt").write_text("not a model")
    found = backend.session.library.scan([str(folder)], lambda p: None, lambda: None)
    entries = list({e.path: e for e in found}.values())  # each file listed, then read
    dialog = MergeDialog(entries)
    qtbot.addWidget(dialog)
    assert [dialog.models[0].itemData(i).name for i in range(dialog.models[0].count())] == [
        a.name,
        b.name,
        c.name,
    ]
    dialog.method.setCurrentIndex(dialog.method.findData(MergeMethod.ADD_DIFFERENCE))
    assert dialog.models[2].isEnabled() and dialog.ratio.maximum() == 10.0
    dialog.ratio.setValue(0.7)
    dialog.blocks.setText("in=0.2, middle_block.=1.5")
    out = tmp_path / "merged.safetensors"
    dialog.output.setText(str(out))
    paths, recipe, target = dialog.request()
    assert paths == [a, b, c] and target == out
    assert recipe == MergeRecipe(MergeMethod.ADD_DIFFERENCE, 0.7, (("in", 0.2), ("middle_block.", 1.5)))
    with qtbot.waitSignal(backend.merged, timeout=120_000) as done:
        backend.merge_models(paths, recipe, out)
    result = done.args[0]
    assert isinstance(result, MergeResult) and result.path == out and result.merged > 0
    with safe_open(str(out), "pt") as f:
        record = read_recipe(f.metadata())
    assert record is not None and MergeRecipe.from_json(record) == recipe
    dialog.method.setCurrentIndex(dialog.method.findData(MergeMethod.ADD))
    assert not dialog.models[2].isEnabled() and not dialog.ratio.isEnabled()
