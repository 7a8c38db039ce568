"""The loaded models panel: each loaded file and its components with dtype, size and placement.

A view over the worker's ``models_changed`` snapshots: where each component is (system RAM, the
GPU, or partly on the GPU with the rest streaming), and buttons to place a model on the GPU,
offload it back to RAM, or unload it. Every move is the memory manager's decision; its reasons
appear in the memory panel's event list.
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
from app.backend.messages import ComponentInfo, ModelInfo
from app.backend.placement import PlacementInfo
from app.gui.theme import human_bytes, kind_icon, kind_text, set_icon

COLUMNS = ("Model", "Dtype", "Size", "On", "LoRA")
ROLE_DATA = Qt.ItemDataRole.UserRole + 1  # a component row's role; none on a model row


class LoadedModelsPanel(QWidget):
    def __init__(self, backend: Backend, placement: PlacementInfo, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.backend = backend
        self.placement = placement
        self.models: tuple[ModelInfo, ...] = ()
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(list(COLUMNS))
        self.tree.setRootIsDecorated(True)
        self.tree.setUniformRowHeights(True)
        self.tree.setAlternatingRowColors(True)
        header = self.tree.header()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for col, width in ((1, 56), (2, 70), (3, 74), (4, 46)):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Fixed)
            self.tree.setColumnWidth(col, width)
        header.setMinimumSectionSize(40)
        rows = 4  # a model and its three components stay readable however short the dock is
        row = self.tree.fontMetrics().height() + 8
        self.tree.setMinimumHeight(header.sizeHint().height() + rows * row + 4)
        self.tree.itemSelectionChanged.connect(self._update_buttons)
        self.tree.currentItemChanged.connect(lambda *_: self._update_buttons())
        self.summary = QLabel("Nothing loaded.")
        self.summary.setObjectName("muted")
        self.summary.setWordWrap(True)
        self.unload_button = QPushButton("Unload")
        set_icon(self.unload_button, "unload")
        self.unload_button.setToolTip("Unload the selected model and release its memory")
        self.unload_button.clicked.connect(self._unload)
        self.gpu_button = QPushButton("Load to GPU")
        set_icon(self.gpu_button, "load")
        self.gpu_button.clicked.connect(self._place)
        self.offload_button = QPushButton("Offload")
        set_icon(self.offload_button, "down")
        self.offload_button.clicked.connect(self._offload)
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
        backend.placement_changed.connect(self.set_placement)
        self.set_placement(placement)

    def set_placement(self, placement: PlacementInfo) -> None:
        self.placement = placement
        if placement.active:
            self.gpu_button.setToolTip(
                f"Place the selected model on {placement.label} (Ctrl+G): fully when it fits, "
                "otherwise partly, with the rest streaming from RAM at each step"
            )
            self.offload_button.setToolTip("Move the selected model back to system RAM (Ctrl+Shift+G)")
        else:
            why = f"{placement.reason} Everything computes from system RAM."
            self.gpu_button.setToolTip(why)
            self.offload_button.setToolTip(why)
        self.show_models(self.models)

    def show_models(self, models: tuple[ModelInfo, ...]) -> None:
        keep, keep_role = self.selected_key(), self.selected_role()
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
                place, where = self._where(c)
                child = QTreeWidgetItem(
                    [f"{kind_text(c.role)} · {c.family}", c.dtype, human_bytes(c.bytes), place, patched]
                )
                child.setIcon(0, kind_icon(c.role))
                child.setToolTip(3, where)
                child.setToolTip(4, f"{c.patched_keys} weights patched by the LoRA stack")
                child.setToolTip(
                    0, f"{kind_text(c.role)} ({c.family}): {human_bytes(c.bytes)} of {c.dtype} on {c.device}"
                )
                child.setData(0, Qt.ItemDataRole.UserRole, m.key)
                child.setData(0, ROLE_DATA, c.role)
                child.setTextAlignment(2, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                top.addChild(child)
            top.setTextAlignment(2, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.tree.addTopLevelItem(top)
            top.setExpanded(True)
        if self.models:
            tops = [self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())]
            again = [t for t in tops if t.data(0, Qt.ItemDataRole.UserRole) == keep]
            item = again[0] if again else tops[0]
            if again and keep_role is not None:
                kids = [item.child(i) for i in range(item.childCount())]
                item = next((k for k in kids if k.data(0, ROLE_DATA) == keep_role), item)
            self.tree.setCurrentItem(item)
            total = sum(m.bytes for m in self.models)
            on_gpu = sum(c.device_bytes for m in self.models for c in m.components if c.placed)
            streamed = sum(c.streamed_bytes for m in self.models for c in m.components if c.placed)
            text = f"{len(self.models)} loaded · {human_bytes(total)} in total · {human_bytes(on_gpu)} on GPU"
            if streamed:
                text += f" · {human_bytes(streamed)} streams from RAM"
            if not self.placement.active:
                text += " · no GPU: computed on the CPU"
            self.summary.setText(text)
        else:
            self.summary.setText("Nothing loaded. Double-click a checkpoint in the browser, or press Ctrl+L.")
        self._update_buttons()

    def selected_key(self) -> str | None:
        item = self.tree.currentItem()
        return None if item is None else item.data(0, Qt.ItemDataRole.UserRole)

    def _where(self, c: ComponentInfo) -> tuple[str, str]:
        """The "On" column and its tooltip."""
        if not c.placed:
            if self.placement.active:
                return "RAM", "in system RAM (memory-mapped from the file); Load to GPU places it"
            return "RAM", "in system RAM, computed on the CPU"
        device = self.placement.label
        if c.streamed_bytes:
            share = c.device_bytes / max(1, c.device_bytes + c.streamed_bytes)
            return (
                f"GPU {share:.0%}",
                f"{human_bytes(c.device_bytes)} resident on {device}; the other "
                f"{human_bytes(c.streamed_bytes)} stream from RAM layer by layer at each step",
            )
        return "GPU", f"all {human_bytes(c.device_bytes)} on {device}"

    def selected_role(self) -> str | None:
        """The component selected (its role), or None when a whole model row is."""
        item = self.tree.currentItem()
        return None if item is None else item.data(0, ROLE_DATA)

    def selected_model(self) -> ModelInfo | None:
        key = self.selected_key()
        return next((m for m in self.models if m.key == key), None)

    def _update_buttons(self) -> None:
        model = self.selected_model()
        self.unload_button.setEnabled(model is not None)
        active = self.placement.active and model is not None
        fully = model is not None and all(c.placed and not c.streamed_bytes for c in model.components)
        self.gpu_button.setEnabled(active and not fully)
        self.offload_button.setEnabled(
            active and model is not None and any(c.placed for c in model.components)
        )

    def _place(self) -> None:
        key = self.selected_key()
        if key is not None and self.placement.active:
            self.backend.place(key, self.selected_role())

    def _offload(self) -> None:
        key = self.selected_key()
        if key is not None and self.placement.active:
            self.backend.offload(key, self.selected_role())

    def _unload(self) -> None:
        key = self.selected_key()
        if key is not None:
            self.backend.unload(key)
