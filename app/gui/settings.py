"""Settings: model folders, VRAM mode and reserve, dtype overrides, theme; kept in QSettings."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from PySide6.QtCore import QSettings, QSize, Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.backend.placement import PlacementConfig
from app.gui.vram_help import vram_help
from core.memory.policy import DtypeOverride, MemorySettings, VramState
from core.units import MIB

ROLES = (("diffusion_model", "Diffusion model"), ("text_encoder", "Text encoders"), ("vae", "VAE"))
DTYPES = ("auto", "fp32", "fp16", "bf16")
FP8_MATMUL = "fp8 matmul for the diffusion model"
FP8_MATMUL_HINT = "NVIDIA RTX 40xx / H100 and newer: faster, slightly different pictures. From the next load."


@dataclass(frozen=True)
class AppSettings:
    folders: tuple[str, ...] = ()
    vram_mode: str = "auto"  # "auto" or a VramState value
    reserve_mib: int = -1  # -1: automatic
    dtype_overrides: dict[str, str] = field(default_factory=dict)  # role -> fp16/bf16/fp32
    dark_theme: bool = True
    lora_min: float = -1.0
    lora_max: float = 2.0
    simulate_vram_mib: int = 0  # a simulated card (no GPU) or a cap on the real one; 0 = off
    ray_address: str = ""  # the queue's executor: "" in-process, else a Ray address or local:N
    fp8_matmul: bool = False  # the diffusion model's compute override fp8_e4m3fn (decided at load)
    check_updates: bool = False  # opt-in: ask the release feed at start whether a newer Loadout exists

    def placement_config(self) -> PlacementConfig:
        return PlacementConfig(self.memory_settings(), max(0, self.simulate_vram_mib) * MIB)

    def memory_settings(self) -> MemorySettings:
        state = None if self.vram_mode == "auto" else VramState.parse(self.vram_mode)
        reserve = None if self.reserve_mib < 0 else self.reserve_mib * MIB
        storage = {role: d for role, d in self.dtype_overrides.items() if d != "auto"}
        compute = {"diffusion_model": "fp8_e4m3fn"} if self.fp8_matmul else {}
        overrides = tuple(
            DtypeOverride(role, storage=storage.get(role), compute=compute.get(role))  # type: ignore[arg-type]
            for role in sorted({*storage, *compute})
        )
        return MemorySettings(vram_state=state, reserve_bytes=reserve, dtype_overrides=overrides)

    @classmethod
    def load(cls, store: QSettings) -> AppSettings:
        def get(key: str, default: object) -> object:
            raw = store.value(key)
            if raw is None:
                return default
            try:
                return json.loads(str(raw))
            except ValueError:
                return default

        d = cls()
        folders = get("library/folders", [])
        overrides = get("memory/dtype_overrides", {})
        try:
            return cls(
                folders=tuple(str(f) for f in folders) if isinstance(folders, list) else (),
                vram_mode=str(get("memory/vram_mode", d.vram_mode)),
                reserve_mib=int(get("memory/reserve_mib", d.reserve_mib)),  # type: ignore[call-overload]
                dtype_overrides={str(k): str(v) for k, v in overrides.items()}
                if isinstance(overrides, dict)
                else {},
                dark_theme=bool(get("ui/dark_theme", d.dark_theme)),
                lora_min=float(get("lora/min", d.lora_min)),  # type: ignore[arg-type]
                lora_max=float(get("lora/max", d.lora_max)),  # type: ignore[arg-type]
                simulate_vram_mib=int(get("memory/simulate_vram_mib", 0)),  # type: ignore[call-overload]
                ray_address=str(get("queue/ray_address", "")),
                fp8_matmul=get("memory/fp8_matmul", False) is True,
                check_updates=get("app/check_updates", False) is True,
            )
        except (TypeError, ValueError):
            return d  # a hand-edited, broken settings file: start from the defaults

    def save(self, store: QSettings) -> None:
        values = {
            "library/folders": list(self.folders),
            "memory/vram_mode": self.vram_mode,
            "memory/reserve_mib": self.reserve_mib,
            "memory/dtype_overrides": self.dtype_overrides,
            "ui/dark_theme": self.dark_theme,
            "lora/min": self.lora_min,
            "lora/max": self.lora_max,
            "memory/simulate_vram_mib": self.simulate_vram_mib,
            "queue/ray_address": self.ray_address,
            "memory/fp8_matmul": self.fp8_matmul,
            "app/check_updates": self.check_updates,
        }
        for key, value in values.items():
            store.setValue(key, json.dumps(value))
        store.sync()

    def with_folder(self, folder: str) -> AppSettings:
        return self if folder in self.folders else replace(self, folders=(*self.folders, folder))


class SettingsDialog(QDialog):
    def __init__(
        self, settings: AppSettings, parent: QWidget | None = None, *, has_gpu: bool = False
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Loadout settings")
        self.setMinimumWidth(560)
        self.base = settings
        self.dark = QCheckBox("Dark theme")
        self.dark.setChecked(settings.dark_theme)
        self.updates = QCheckBox(
            "Tell me when a newer Loadout is released (asks the release page once per start)"
        )
        self.updates.setChecked(settings.check_updates)
        self.updates.setToolTip(
            "Off by default. Nothing is sent but the request; without a network it stays quiet."
        )
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons = buttons
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        body = QWidget()
        groups = QVBoxLayout(body)
        groups.setContentsMargins(0, 0, 0, 0)
        groups.addWidget(self._library_group(settings))
        groups.addWidget(self._memory_group(settings, has_gpu))
        groups.addWidget(self._precision_group(settings))
        groups.addWidget(self._queue_group(settings))
        groups.addWidget(self.dark)
        groups.addWidget(self.updates)
        # the groups scroll (the buttons stay): on a 1280x720 or smaller screen the whole dialog,
        # its wrapped texts at their full height, is taller than the screen
        self.body = QScrollArea(widgetResizable=True, frameShape=QFrame.Shape.NoFrame)
        self.body.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.body.setWidget(body)
        layout = QVBoxLayout(self)
        layout.addWidget(self.body)
        layout.addWidget(buttons)
        self.resize(self.sizeHint())  # Qt's own first size stops at 2/3 of the screen's height

    def sizeHint(self) -> QSize:  # the size the dialog opens at
        """As tall as the groups need at the dialog's width (wrapped texts included), within the screen."""
        outer = self.layout()
        m = outer.contentsMargins()
        width = max(self.minimumWidth(), super().sizeHint().width())
        groups = self.body.widget().heightForWidth(width - m.left() - m.right())
        chrome = m.top() + m.bottom() + outer.spacing() + self.buttons.sizeHint().height()
        screen = self.screen()
        title_bar = 40
        room = screen.availableGeometry().height() - title_bar if screen is not None else groups + chrome
        return QSize(width, max(240, min(groups + chrome, room)))

    def _library_group(self, settings: AppSettings) -> QGroupBox:
        """The folders the library scans."""
        self.folders = QListWidget()
        self.folders.addItems(list(settings.folders))
        self.folders.setMaximumHeight(self.fontMetrics().height() * 7)  # a handful of folders in view
        add = QPushButton("Add folder…")
        add.clicked.connect(self._add_folder)
        remove = QPushButton("Remove")
        remove.clicked.connect(
            lambda: [self.folders.takeItem(self.folders.row(i)) for i in self.folders.selectedItems()]
        )
        folder_buttons = QHBoxLayout()
        folder_buttons.addWidget(add)
        folder_buttons.addWidget(remove)
        folder_buttons.addStretch(1)
        hint = QLabel(
            "ComfyUI or A1111 install folders, extra_model_paths.yaml files, or plain folders. "
            "Files are read in place, never copied."
        )
        hint.setWordWrap(True)
        hint.setObjectName("muted")
        library = QGroupBox("Model folders")
        lib_layout = QVBoxLayout(library)
        lib_layout.addWidget(hint)
        lib_layout.addWidget(self.folders)
        lib_layout.addLayout(folder_buttons)
        return library

    def _memory_group(self, settings: AppSettings, has_gpu: bool) -> QGroupBox:
        """VRAM mode, the reserve, a simulated (or limited) card, and what the mode does."""
        self.vram = QComboBox()
        self.vram.addItem("Automatic (from the card's size)", "auto")
        for state in VramState:
            self.vram.addItem(state.title.capitalize(), state.option)
        self.vram.setCurrentIndex(max(0, self.vram.findData(settings.vram_mode)))
        self.reserve = QSpinBox()
        self.reserve.setRange(-1, 16384)
        self.reserve.setSingleStep(100)
        self.reserve.setSpecialValueText("automatic")
        self.reserve.setSuffix(" MiB")
        self.reserve.setValue(settings.reserve_mib)
        self.simulate = QSpinBox()
        self.simulate.setRange(0, 1 << 20)
        self.simulate.setSingleStep(512)
        self.simulate.setSuffix(" MiB")
        self.simulate.setSpecialValueText("off" if not has_gpu else "the whole card")
        self.simulate.setValue(max(0, settings.simulate_vram_mib))
        self.simulate.setToolTip(
            "Try a smaller card: the memory manager plans, evicts and streams as it would on a card of "
            "this size"
            if has_gpu
            else "No GPU here: simulate one of this size on the CPU to see the memory manager place, "
            "evict and stream (the math runs on the CPU)"
        )
        memory = QGroupBox("Memory")
        # the wrapped texts sit in a box layout below the form: a QFormLayout row does not grow
        # with its label's wrapped height, and the dialog cut the second line off
        mem_box = QVBoxLayout(memory)
        mem_form = QFormLayout()
        mem_box.addLayout(mem_form)
        mem_form.addRow("VRAM mode", self.vram)
        mem_form.addRow("Keep free for other apps", self.reserve)
        mem_form.addRow("Limit the card to" if has_gpu else "Simulate a GPU of", self.simulate)
        self.vram_help = QLabel(wordWrap=True, objectName="muted")
        mem_box.addWidget(self.vram_help)
        self.fp8 = QCheckBox(FP8_MATMUL, checked=settings.fp8_matmul)
        self.fp8.setToolTip(
            "Linear layers multiply in 8 bits (torch._scaled_mm); weights are kept or quantized to fp8 "
            "e4m3fn when the model loads. Applies to models loaded from now on; the event list says "
            "what was decided, and why not on a card without fp8 matmul"
        )
        mem_box.addWidget(self.fp8)
        self.fp8_hint = QLabel(FP8_MATMUL_HINT, wordWrap=True, objectName="muted")  # wraps: never widens
        mem_box.addWidget(self.fp8_hint)
        self._has_gpu = has_gpu
        self.vram.currentIndexChanged.connect(self._explain_vram)
        self.simulate.valueChanged.connect(self._explain_vram)
        self._explain_vram()
        return memory

    def _precision_group(self, settings: AppSettings) -> QGroupBox:
        """The storage dtype per role when loading."""
        self.dtypes: dict[str, QComboBox] = {}
        precision = QGroupBox("Precision (storage dtype when loading)")
        prec_form = QFormLayout(precision)
        for role, label in ROLES:
            combo = QComboBox()
            for d in DTYPES:
                combo.addItem("as stored in the file" if d == "auto" else d, d)
            combo.setCurrentIndex(max(0, combo.findData(settings.dtype_overrides.get(role, "auto"))))
            self.dtypes[role] = combo
            prec_form.addRow(label, combo)
        return precision

    def _queue_group(self, settings: AppSettings) -> QGroupBox:
        """Where the Queue runs its jobs."""
        self.ray = QLineEdit(settings.ray_address)
        self.ray.setPlaceholderText(
            "empty: in this process; or a Ray address (HOST:6379, ray://HOST:10001, local:2)"
        )
        self.ray.setToolTip(
            "Where the Queue runs its jobs: here, or on a Ray cluster (needs Loadout installed as a Python "
            "package with its cluster extra: python -m pip install 'loadout[cluster]'; the ready-to-run "
            "downloads run jobs here only)"
        )
        queue = QGroupBox("Queue")
        queue_form = QFormLayout(queue)
        queue_form.addRow("Run jobs on", self.ray)
        return queue

    def _explain_vram(self) -> None:
        self.vram_help.setText(vram_help(self.simulate.value(), str(self.vram.currentData()), self._has_gpu))

    def _add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a model folder")
        if folder:
            self.folders.addItem(folder)

    def settings(self) -> AppSettings:
        return replace(
            self.base,
            folders=tuple(self.folders.item(i).text() for i in range(self.folders.count())),
            vram_mode=str(self.vram.currentData()),
            reserve_mib=self.reserve.value(),
            dtype_overrides={
                r: str(c.currentData()) for r, c in self.dtypes.items() if c.currentData() != "auto"
            },
            dark_theme=self.dark.isChecked(),
            simulate_vram_mib=self.simulate.value(),
            ray_address=self.ray.text().strip(),
            fp8_matmul=self.fp8.isChecked(),
            check_updates=self.updates.isChecked(),
        )
