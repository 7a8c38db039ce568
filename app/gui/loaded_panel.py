"""The loaded models panel: each loaded file and its components with dtype, size and placement.

A view over the worker's ``models_changed`` snapshots. Unload works today; moving components to
the GPU and offloading them arrives with the memory manager (the buttons say so).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.backend.backend import Backend
from app.backend.messages import ModelInfo
from app.gui.theme import human_bytes, kind_icon, kind_text, set_icon

COLUMNS = ("Model", "Dtype", "Size", "On", "LoRA")


class LoadedModelsPanel(QWidget):
    def __init__(self, backend: Backend, has_gpu: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.backend = backend
        self.models: tuple[ModelInfo, ...] = ()
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(list(COLUMNS))
        self.tree.setRootIsDecorated(True)
        self.tree.setUniformRowHeights(True)
        self.tree.setAlternatingRowColors(True)
        header = self.tree.header()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col, width in ((1, 56), (2, 70), (3, 46), (4, 46)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Fixed)
            self.tree.setColumnWidth(col, width)
        header.setMinimumSectionSize(40)
        self.tree.itemSelectionChanged.connect(self._update_buttons)
        self.summary = QLabel("Nothing loaded.")
        self.summary.setObjectName("muted")
        self.summary.setWordWrap(True)
        self.unload_button = QPushButton("Unload")
        set_icon(self.unload_button, "unload")
        self.unload_button.setToolTip("Unload the selected model and release its memory")
        self.unload_button.clicked.connect(self._unload)
        self.gpu_button = QPushButton("Load to GPU")
        self.offload_button = QPushButton("Offload to RAM")
        why = (
            "No GPU found: everything stays in system RAM."
            if not has_gpu
            else "Moving models between GPU and RAM arrives with the memory manager."
        )
        for button in (self.gpu_button, self.offload_button):
            button.setEnabled(False)
            button.setToolTip(why)
        buttons = QHBoxLayout()
        buttons.addWidget(self.unload_button)
        buttons.addWidget(self.gpu_button)
        buttons.addWidget(self.offload_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.summary)
        layout.addLayout(buttons)
        backend.models_changed.connect(self.show_models)
        self._update_buttons()

    def show_models(self, models: tuple[ModelInfo, ...]) -> None:
        self.models = tuple(models)
        self.tree.clear()
        for m in self.models:
            top = QTreeWidgetItem([m.name, "", human_bytes(m.bytes), "", ""])
            top.setIcon(0, kind_icon(m.kind))
            top.setToolTip(0, f"{m.path}\n{kind_text(m.kind)} ({m.family}), loaded in {m.load_seconds:.2f} s")
            top.setData(0, Qt.ItemDataRole.UserRole, m.key)
            font = top.font(0)
            font.setBold(True)
            top.setFont(0, font)
            for c in m.components:
                patched = str(c.patched_keys) if c.patched_keys else "-"
                placement = "RAM" if c.device == "cpu" else c.device.upper()
                child = QTreeWidgetItem(
                    [f"{kind_text(c.role)} · {c.family}", c.dtype, human_bytes(c.bytes), placement, patched]
                )
                child.setIcon(0, kind_icon(c.role))
                child.setToolTip(
                    3, "in system RAM, computed on the CPU" if c.device == "cpu" else f"on {c.device}"
                )
                child.setToolTip(4, f"{c.patched_keys} weights patched by the LoRA stack")
                child.setToolTip(
                    0, f"{kind_text(c.role)} ({c.family}): {human_bytes(c.bytes)} of {c.dtype} on {c.device}"
                )
                child.setData(0, Qt.ItemDataRole.UserRole, m.key)
                child.setTextAlignment(2, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                top.addChild(child)
            top.setTextAlignment(2, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.tree.addTopLevelItem(top)
            top.setExpanded(True)
        if self.models:
            self.tree.setCurrentItem(self.tree.topLevelItem(0))
            total = sum(m.bytes for m in self.models)
            on_gpu = sum(c.bytes for m in self.models for c in m.components if c.device != "cpu")
            self.summary.setText(
                f"{len(self.models)} loaded · {human_bytes(total)} in total · "
                f"{human_bytes(total - on_gpu)} in RAM · {human_bytes(on_gpu)} on GPU"
            )
        else:
            self.summary.setText("Nothing loaded. Double-click a checkpoint in the browser, or press Ctrl+L.")
        self._update_buttons()

    def selected_key(self) -> str | None:
        item = self.tree.currentItem()
        return None if item is None else item.data(0, Qt.ItemDataRole.UserRole)

    def _update_buttons(self) -> None:
        self.unload_button.setEnabled(self.selected_key() is not None)

    def _unload(self) -> None:
        key = self.selected_key()
        if key is not None:
            self.backend.unload(key)
