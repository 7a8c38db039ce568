"""File > Merge models…: two or three of the library's checkpoints or diffusion models merged by
one of ComfyUI's merge methods into a new file (``core.merging``), on the backend's worker through
the session's placement. The dialog only gathers the recipe; the engine checks and refuses it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QWidget,
)

from app.backend.backend import Backend
from core.errors import LoadoutError
from core.library import Entry
from core.merging.merge import MergeResult
from core.merging.recipe import MergeMethod, MergeRecipe

METHOD_WORDS = {
    MergeMethod.WEIGHTED: "Weighted sum: A × ratio + B × (1 − ratio)",
    MergeMethod.ADD_DIFFERENCE: "Add difference: A + (B − C) × multiplier",
    MergeMethod.SUBTRACT: "Subtract: (A − B) × multiplier",
    MergeMethod.ADD: "Add: A + B",
}


def mergeable(entries: Sequence[Entry]) -> list[Entry]:
    """The library's files a merge can take: read checkpoints and diffusion models (by name)."""
    found = [e for e in entries if e.status == "ok" and e.kind in ("checkpoint", "diffusion_model")]
    return sorted(found, key=lambda e: e.path.name.lower())


class MergeDialog(QDialog):
    def __init__(self, entries: Sequence[Entry], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Merge models")
        self.entries = mergeable(entries)
        form = QFormLayout(self)
        self.models = [self._picker(i) for i in range(3)]
        for name, combo in zip("ABC", self.models, strict=True):
            form.addRow(f"Model {name}", combo)
        self.method = QComboBox()
        for method, words in METHOD_WORDS.items():
            self.method.addItem(words, method)
        form.addRow("Method", self.method)
        self.ratio = QDoubleSpinBox(decimals=3, singleStep=0.05)
        form.addRow("Ratio", self.ratio)
        self.blocks = QLineEdit(placeholderText="per block, e.g. in=0.2,mid=0.5,out=0.8 (optional)")
        form.addRow("Blocks", self.blocks)
        self.text_encoders = QCheckBox("Merge the text encoders too (else model A's)")
        form.addRow("", self.text_encoders)
        self.output = QLineEdit()
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout()
        row.addWidget(self.output, 1)
        row.addWidget(browse)
        form.addRow("Save as", row)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self.method.currentIndexChanged.connect(self._method_changed)
        self._method_changed()

    def _picker(self, i: int) -> QComboBox:
        combo = QComboBox()
        for entry in self.entries:
            family = f" ({entry.family})" if entry.family else ""
            combo.addItem(entry.path.name + family, entry.path)
        combo.setCurrentIndex(min(i, combo.count() - 1))
        return combo

    def _method_changed(self) -> None:
        method = MergeMethod(self.method.currentData())
        number = method.number
        self.models[2].setEnabled(method.inputs == 3)
        self.ratio.setEnabled(number is not None)
        self.blocks.setEnabled(number is not None)
        if number is not None:
            self.ratio.setRange(number.lo, number.hi)
            self.ratio.setValue(0.5 if method is MergeMethod.WEIGHTED else 1.0)

    def _browse(self) -> None:
        start = str(self.models[0].currentData().parent) if self.entries else ""
        name, _ = QFileDialog.getSaveFileName(
            self, "Save the merged model", start, "safetensors (*.safetensors)"
        )
        if name:
            self.output.setText(name)

    def request(self) -> tuple[list[Path], MergeRecipe, Path]:
        """The models, the recipe and the output the dialog says (LoadoutError for bad input)."""
        method = MergeMethod(self.method.currentData())
        paths = [c.currentData() for c in self.models[: method.inputs]]
        if any(p is None for p in paths) or not self.output.text().strip():
            raise LoadoutError("choose the models and where to save", code="bad_argument")
        blocks = []
        for item in filter(None, (t.strip() for t in self.blocks.text().split(","))):
            name, _, value = item.rpartition("=")
            try:
                blocks.append((name.strip(), float(value)))
            except ValueError:
                raise LoadoutError(f"{item!r} is not BLOCK=RATIO", fix="Write in=0.2,out=0.8",
                                   code="bad_argument") from None  # fmt: skip
        ratio = self.ratio.value() if method.number is not None else 1.0
        te = ratio if self.text_encoders.isChecked() else None
        return paths, MergeRecipe(method, ratio, tuple(blocks), te), Path(self.output.text().strip())


def open_merge_dialog(parent: QWidget, backend: Backend, entries: Sequence[Entry]) -> MergeDialog | None:
    """Ask for a merge and submit it; the window says when the file is written (or why not)."""
    dialog = MergeDialog(entries, parent)
    if not dialog.exec():
        return None
    try:
        paths, recipe, out = dialog.request()
    except LoadoutError as exc:
        QMessageBox.warning(parent, "Merge models", exc.message)
        return dialog

    def done(result: object) -> None:
        backend.merged.disconnect(done)
        if isinstance(result, MergeResult):
            QMessageBox.information(
                parent, "Merge models", f"Wrote {result.path.name}: {result.merged} tensors merged."
            )

    backend.merged.connect(done)
    backend.merge_models(paths, recipe, out)
    return dialog
