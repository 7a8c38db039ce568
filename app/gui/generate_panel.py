"""The Generate panel: prompt and KSampler settings in, pictures out.

A view only: it emits :attr:`GeneratePanel.generate_requested` with an
:class:`~core.generate.request.ImageSettings` (the window adds the loaded models and LoRA stack
and hands it to the backend), and shows what the backend reports: phases and steps on the
progress bar, the live latent preview, and finished pictures in a gallery with their parameters.
A PNG dropped on the panel fills every field from its parameters (A1111, Forge, Loadout).
"""

from __future__ import annotations

import random
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.backend.progress_words import PHASE_WORDS
from app.gui import generate_apply, generate_fields
from app.gui.control_picture_row import ControlPictureBox
from app.gui.guidance_controls import GuidanceControls
from app.gui.model_picker import ModelPicker
from app.gui.needed_inputs import GenerateGate
from app.gui.prompt_completion import PromptCompleter
from app.gui.reference_slots import ReferenceSlots
from app.gui.region_controls import RegionControls
from app.gui.schedule_controls import ScheduleControls
from app.gui.size_controls import SizeControls
from app.gui.sweep_controls import SweepControls
from app.gui.theme import icon, set_icon
from app.gui.widgets import ElidedLabel, StatusText
from app.gui.workflow_controls import WorkflowControls
from app.gui.workflow_hires import HiresControls
from core.detect.spec import NO_MODEL_DEFAULTS, GenerationDefaults
from core.errors import LoadoutError
from core.generate.events import GenerateProgress, GenerateResult
from core.generate.parameters import SAMPLER_LABELS, GenerationParameters, parse_parameters
from core.generate.png import read_png_parameters
from core.generate.request import MAX_SEED, ImageSettings, Sampling
from core.sampling import SAMPLERS, SCHEDULERS
from core.values import CFG, GUIDANCE, STEPS

NO_MODEL = "Load a checkpoint or diffusion model to generate."
PROMPT_CHARS = generate_apply.PROMPT_CHARS


class GeneratePanel(QWidget):
    seed: QLineEdit  # the seed row's (generate_fields.seed_row)
    random_seed: QCheckBox
    reuse_button: QToolButton
    generate_requested = Signal(object)  # ImageSettings
    error = Signal(object)  # LoadoutError from a dropped file the panel could not read
    output_folder_requested = Signal()
    sweep_requested = Signal(object, object)  # ImageSettings, SessionGrid (one strength axis)
    preview_ready = Signal(object)  # np.ndarray (h, w, 3): the viewer shows it
    pictures_ready = Signal(object)  # GenerateResult: the viewer and the gallery show it
    stop_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAcceptDrops(True)
        self.family: str | None = None
        self.defaults: GenerationDefaults = NO_MODEL_DEFAULTS
        self.last_seed: int | None = None
        self._pending: dict[str, object] | None = None  # saved settings waiting for their family
        self._build_prompts()
        self._build_sampling()
        self.sweeps = SweepControls()
        self.sweep_lora, self.sweep_values, self.sweep_target = (
            self.sweeps.lora,
            self.sweeps.values,
            self.sweeps.target,
        )
        self.hires = HiresControls()
        form = self._build_form()
        out_row = self._build_actions()
        self.model = ModelPicker()
        self.workflows = WorkflowControls()
        self.references = ReferenceSlots()  # shown while the loaded family takes references
        self.control_picture = ControlPictureBox()  # shown while the model or a LoRA reads one
        self.guidance_patches = GuidanceControls()
        self.lora_schedules = ScheduleControls()
        self.regions = RegionControls(lambda: (self.width_.value() // 8 * 8, self.height_.value() // 8 * 8))
        # Generate waits for a model and for every input a box says the generation needs
        needs = (self.control_picture, self.workflows)
        self.gate = GenerateGate(self.generate_button, self.status, needs, NO_MODEL)
        # the settings scroll; the model, prompts and the Generate row above and below them never do
        inner = QWidget()
        inner_layout = QVBoxLayout(inner)
        inner_layout.setContentsMargins(0, 0, 4, 0)
        inner_layout.addLayout(form)
        boxes = (self.references, self.control_picture, self.workflows, self.guidance_patches)
        for box in (*boxes, self.lora_schedules, self.regions):
            inner_layout.addWidget(box)
        inner_layout.addLayout(out_row)
        inner_layout.addStretch(1)
        self.settings_area = QScrollArea()
        self.settings_area.setWidgetResizable(True)
        self.settings_area.setFrameShape(QFrame.Shape.NoFrame)
        self.settings_area.setWidget(inner)
        self.settings_area.setMinimumHeight(60)
        self.settings_area.setMinimumWidth(inner.minimumSizeHint().width() + 16)
        controls = QVBoxLayout(self)
        controls.setContentsMargins(8, 6, 8, 6)
        controls.addWidget(self.model)
        controls.addWidget(self.prompt, 2)
        controls.addWidget(self.negative, 1)
        controls.addWidget(self.settings_area, 3)
        run_row = QHBoxLayout()
        run_row.addWidget(self.generate_button, 1)
        run_row.addWidget(self.stop_button)
        controls.addLayout(run_row)
        controls.addWidget(self.progress)
        controls.addWidget(self.status)
        self.set_family(None, NO_MODEL_DEFAULTS)
        self.set_available(False, NO_MODEL)

    def _build_prompts(self) -> None:
        self.prompt = QPlainTextEdit(
            placeholderText="Prompt: what the picture shows. (word:1.2) weights a word."
        )
        self.negative = QPlainTextEdit(placeholderText="Negative prompt: what to avoid")
        self.prompt.setTabChangesFocus(True)
        self.negative.setTabChangesFocus(True)
        lines = self.prompt.fontMetrics().lineSpacing()
        self.prompt.setMinimumHeight(3 * lines + 12)
        # about six lines: in a short dock the settings below come first, not a tall empty box
        self.prompt.setMaximumHeight(8 * lines)
        self.negative.setMinimumHeight(2 * lines + 12)
        self.negative.setMaximumHeight(4 * lines)
        # the library's embeddings and LoRA trigger words, offered as a word is typed
        self.completers = (PromptCompleter(self.prompt), PromptCompleter(self.negative))

    def _build_sampling(self) -> None:
        """Steps, CFG, Flux's guidance, sampler and scheduler."""
        # the fields accept what the engine accepts (core.values), so a value read from a picture
        # either fits or is ignored with a reason, never clamped or overflowed
        self.steps = QSpinBox(minimum=int(STEPS.lo), maximum=int(STEPS.hi), value=20)
        self.cfg = QDoubleSpinBox(minimum=CFG.lo, maximum=CFG.hi, value=7.0, singleStep=0.5, decimals=1)
        self.guidance = QDoubleSpinBox(
            minimum=GUIDANCE.lo, maximum=GUIDANCE.hi, value=3.5, singleStep=0.5, decimals=1
        )
        self.guidance.setToolTip(
            "Flux's distilled guidance (ComfyUI's FluxGuidance); CFG stays 1 for Flux-dev"
        )
        # the engine's registries, so the lists hold exactly what the engine runs
        self.sampler = QComboBox()
        for name, spec in SAMPLERS.items():
            label = SAMPLER_LABELS.get(name)
            self.sampler.addItem(f"{name}  ({label})" if label else name, name)
            self.sampler.setItemData(self.sampler.count() - 1, spec.summary, Qt.ItemDataRole.ToolTipRole)
        self.scheduler = QComboBox()
        for name in SCHEDULERS:
            self.scheduler.addItem(name, name)
        for combo in (self.sampler, self.scheduler):  # the panel fits a 380 px dock
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(9)

    def _build_form(self) -> QFormLayout:
        form = QFormLayout()
        form.addRow("Seed", generate_fields.seed_row(self))
        form.addRow("Steps", self.steps)
        form.addRow("CFG", self.cfg)
        form.addRow("Guidance", self.guidance)
        self.guidance_label = form.labelForField(self.guidance)
        form.addRow("Sampler", self.sampler)
        form.addRow("Scheduler", self.scheduler)
        self.clip_skip = generate_fields.clip_skip_box()
        form.addRow("Clip skip", self.clip_skip)
        self.sizes = SizeControls()  # the family's presets; width × height below
        self.size, self.width_, self.height_ = self.sizes.presets, self.sizes.width_, self.sizes.height_
        form.addRow("Size", self.sizes)
        self.batch = QSpinBox(minimum=1, maximum=16, value=1)
        form.addRow("Batch", self.batch)
        form.addRow("Sweep", self.sweeps)
        form.addRow("Hires fix", self.hires)
        return form

    def _build_actions(self) -> QHBoxLayout:
        """Generate, the output folder (its row is returned), the progress bar and status line."""
        self.generate_button = QPushButton(icon("run", "#ffffff"), "Generate")
        self.generate_button.setObjectName("primary")
        self.generate_button.setToolTip("Generate (Ctrl+Enter)")
        self.generate_button.clicked.connect(self.generate)
        self.stop_button = QPushButton(icon("stop"), "Stop")
        self.stop_button.setObjectName("interruptButton")
        self.stop_button.setToolTip("Stop the running picture (Esc)")
        self.stop_button.clicked.connect(self.stop_requested.emit)
        self.stop_button.hide()
        for keys in ("Ctrl+Return", "Ctrl+Enter"):
            QShortcut(QKeySequence(keys), self, activated=self.generate)
        self.output = QToolButton(autoRaise=True)
        set_icon(self.output, "folder")
        self.output.clicked.connect(self.output_folder_requested.emit)
        self.output_label = ElidedLabel()  # a long folder is cut with "…", never widens the panel
        self.output_label.setObjectName("muted")
        out_row = QHBoxLayout()
        out_row.addWidget(self.output)
        out_row.addWidget(self.output_label, 1)
        self.progress = QProgressBar(maximumHeight=14, textVisible=False)
        self.status = StatusText(NO_MODEL, objectName="muted", wordWrap=True)
        # two lines, always: a longer or shorter message never moves the controls above it (the
        # whole message is in the tooltip)
        self.status.setFixedHeight(2 * self.status.fontMetrics().lineSpacing() + 4)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.status.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        return out_row

    # ----------------------------------------------------------------- settings in and out
    def settings(self) -> ImageSettings:
        """The panel's fields as a request (raises LoadoutError on a bad seed or size)."""
        if self.random_seed.isChecked():
            self.new_seed()
        text = self.seed.text().strip()
        if not text.isdigit():
            raise LoadoutError(
                f"the seed {text!r} is not a whole number", fix=f"Type a number from 0 to {MAX_SEED}",
                code="bad_argument",
            )  # fmt: skip
        flux_guidance = self.guidance.isVisible() or self.defaults.guidance is not None
        sampling = Sampling(
            seed=int(text),
            steps=self.steps.value(),
            cfg=self.cfg.value(),
            sampler=str(self.sampler.currentData()),
            scheduler=str(self.scheduler.currentData()),
            guidance=self.guidance.value() if flux_guidance else None,
        )
        made = self.workflows.apply(
            ImageSettings(
                prompt=self.prompt.toPlainText(),
                negative=self.negative.toPlainText(),
                sampling=sampling,
                width=self.width_.value() // 8 * 8,
                height=self.height_.value() // 8 * 8,
                batch=self.batch.value(),
                hires=self.hires.hires(),
                clip_skip=generate_fields.clip_skip(self),
            )
        )
        made = self.regions.apply(self.lora_schedules.apply(self.guidance_patches.apply(made)))
        return self.control_picture.apply(self.references.apply(made))

    def apply_parameters(self, p: GenerationParameters) -> None:
        """Fill the fields from a picture's parameters (``generate_apply``)."""
        generate_apply.apply_parameters(self, p)

    # ----------------------------------------------------------------- kept across a relaunch
    def fields(self) -> dict[str, object]:
        return generate_fields.fields(self)

    def restore_fields(self, saved: dict[str, object]) -> None:
        self._pending = generate_fields.restore(self, saved)

    def set_family(self, family: str | None, defaults: GenerationDefaults) -> None:
        """Offer the loaded family's sizes and usual settings (its record's ``defaults``, guidance too)."""
        previous, self.family, self.defaults = self.defaults, family, defaults
        self.guidance_patches.use_family(previous.patches, defaults.patches)  # CFGNorm on Qwen-Image-Edit
        self.workflows.controlnets.set_model_family(family)  # those that fit it listed first
        self.sizes.set_presets(defaults.sizes, choose_first=family is not None)
        guided = defaults.guidance is not None
        self.guidance.setVisible(guided)
        if self.guidance_label is not None:
            self.guidance_label.setVisible(guided)
        if family is not None:
            self.cfg.setValue(defaults.cfg)
            self.guidance.setValue(self.guidance.value() if defaults.guidance is None else defaults.guidance)
        for combo, usual in ((self.sampler, defaults.sampler), (self.scheduler, defaults.scheduler)):
            if usual is not None and combo.findData(usual) >= 0:  # Z-Image, Lumina 2: res_multistep
                combo.setCurrentIndex(combo.findData(usual))
        if defaults.steps is not None:
            self.steps.setValue(defaults.steps)
        pending = self._pending
        if pending is not None and family is not None and pending.get("family") == family:
            self._pending = None  # the last session's model again: its settings, not the defaults
            generate_fields.apply_settings(self, pending)

    @property
    def available(self) -> bool:
        return self.gate.available

    @property
    def busy(self) -> bool:
        return self.gate.busy

    def set_available(self, available: bool, reason: str = "") -> None:
        self.gate.set_available(available, reason)

    def set_output_folder(self, folder: Path) -> None:
        self.output_label.setText(f"Saved in {folder}")
        self.output_label.setToolTip(str(folder))
        self.output.setToolTip(f"Pictures are saved in {folder}/<date>/; click to choose another folder")

    def new_seed(self) -> None:
        self.seed.setText(str(random.SystemRandom().randrange(0, 2**32)))

    def reuse_seed(self) -> None:
        if self.last_seed is not None:
            self.seed.setText(str(self.last_seed))
            self.random_seed.setChecked(False)

    def generate(self) -> None:
        if not self.gate.open:  # Ctrl+Enter too: a needed input missing is said on the status line
            return
        try:
            settings = self.settings()
            sweep = self.sweeps.sweep()
        except LoadoutError as exc:
            self.error.emit(exc)
            return
        if sweep is not None:
            self.sweep_requested.emit(settings, sweep)
        else:
            self.generate_requested.emit(settings)

    def set_completions(self, words: list[str]) -> None:
        for completer in self.completers:
            completer.set_words(words)

    def set_loras(self, loras: tuple[tuple[str, str], ...]) -> None:
        """(id, name) of the stack's LoRAs, offered for a strength sweep (off by default)."""
        self.sweeps.set_loras(loras)

    # ----------------------------------------------------------------- what the backend reports
    def on_started(self) -> None:
        self.gate.set_busy(True)
        self.stop_button.show()
        self.progress.setRange(0, 0)
        self.status.setText("Starting…")

    def on_finished(self) -> None:
        self.stop_button.hide()
        if self.progress.maximum() == 0:
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
        self.gate.set_busy(False)

    def on_stopped(self) -> None:
        """Stop (Esc) ended the run: say so instead of leaving the last step's words."""
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.status.setText("Stopped: no picture was saved from this run.")

    def on_progress(self, p: GenerateProgress) -> None:
        if p.steps:
            self.progress.setRange(0, p.steps)
            self.progress.setValue(p.step)
        else:
            self.progress.setRange(0, 0)
        picture = f" (picture {p.image + 1} of {p.images})" if p.images > 1 else ""
        steps = f" {p.step}/{p.steps}" if p.steps else ""
        self.status.setText(
            f"{PHASE_WORDS.get(p.phase, p.phase)}{steps}{picture}{' · ' + p.message if p.message else ''}"
        )
        if p.preview is not None:
            self.preview_ready.emit(p.preview)

    def on_result(self, result: GenerateResult) -> None:
        self.last_seed = result.seed
        self.pictures_ready.emit(result)
        split = ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in result.seconds.items())
        notes = " ".join(result.notes)
        self.status.setText(f"Done: {result.seconds_per_step:.2f} s/step; {split}. {notes}".strip())
        self.progress.setRange(0, 1)
        self.progress.setValue(1)

    # ----------------------------------------------------------------- drag a picture in
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        urls = [u for u in event.mimeData().urls() if u.isLocalFile()]
        if urls:
            self.read_picture(Path(urls[0].toLocalFile()))
            event.acceptProposedAction()

    def read_picture(self, path: Path) -> None:
        try:
            self.apply_parameters(parse_parameters(read_png_parameters(path)))
        except LoadoutError as exc:
            self.error.emit(exc)
