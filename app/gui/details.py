"""The details pane of the browser: what the selected file is, its preview, and whether it fits.

Shows one :class:`~core.library.Entry` (components, trigger words, warnings and errors inline,
its hashes as A1111 and Civitai name them, when it was last used, and the other copies of its
data) and a fit estimate against the memory monitor's free-memory reading, at a chosen dtype.
The title is one line cut in the middle to the pane's width: a long file name never widens the
window.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from datetime import datetime

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.backend.messages import TaskError
from app.backend.monitor import MemoryMonitor
from app.demo import is_sparse_demo
from app.gui.errors import Friendly
from app.gui.theme import colors, human_bytes, human_count, icon, kind_icon, kind_text, set_icon
from app.lora_words import CONTROL_WORDS, trained_scale_text
from core.detect.notes import NOTE_PREFIX, is_note
from core.library import Entry
from core.library.query import Duplicate
from core.memory.fit import FitEstimate, estimate_fit

LOADABLE = ("checkpoint", "diffusion_model", "vae", "text_encoder")


def refusal(entry: Entry) -> Friendly | TaskError | None:
    """Why ``entry`` cannot be loaded (a LoRA: put on the stack) now, in the window's words; None
    when it can."""
    if entry.status == "pending":
        return Friendly("Still reading", f"{entry.name} is being read; try again in a moment.", "info")
    if entry.status == "error":
        return TaskError("load", entry.error_code or "invalid_file", entry.error or "", path=entry.path)
    if entry.kind == "lora":
        return None
    if entry.kind not in LOADABLE:
        kind = entry.kind.replace("_", " ")
        return TaskError("load", "not_loadable", f"{entry.name} is a {kind}.", path=entry.path)
    if entry.record is not None and is_sparse_demo(entry.record.get("metadata")):
        text = f"{entry.name}: load loadout-demo-sd15-tiny instead, which has real weights."
        return TaskError("load", "sparse_demo", text, path=entry.path)
    return None


FIT_DTYPES = (
    ("as stored", None),
    ("fp16", "fp16"),
    ("bf16", "bf16"),
    ("fp32", "fp32"),
    ("fp8", "fp8_e4m3fn"),
)


def _when(t: float | None) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M") if t is not None else "never"


def hash_rows(e: Entry) -> list[tuple[str, str]]:
    """The file's hashes as A1111 and Civitai show them (or that they are still to come)."""
    if e.sha256 is None:
        return [("Hash", "not computed yet (the library hashes files in the background)")]
    rows = [("Hash (AutoV2)", f"<code>{e.sha256[:10]}</code>")]
    if e.kind == "lora":
        rows.append(("LoRA hash (A1111)", f"<code>{(e.addnet or e.sha256)[:12]}</code>"))
    rows.append(("SHA-256", f"<code>{e.sha256[:32]}<br>{e.sha256[32:]}</code>"))
    return rows


def duplicate_html(dup: Duplicate | None) -> str:
    if dup is None:
        return ""
    col = colors()
    paths = "".join(f"<br>&nbsp;&nbsp;{html.escape(str(p))}" for p in dup.others)
    if dup.confirmed:
        return (
            f"<p style='color:{col['warn']}'><b>Duplicate.</b> The same data (SHA-256) as "
            f"{len(dup.others)} other file(s); the copies waste {human_bytes(dup.wasted)}:{paths}</p>"
        )
    return (
        f"<p style='color:{col['muted']}'><b>Possibly a duplicate</b>: the same size as{paths}<br>"
        "The hash, computed in the background, will tell.</p>"
    )


def entry_html(e: Entry, dup: Duplicate | None = None) -> str:
    esc = html.escape
    col = colors()
    rows = [
        ("File", esc(e.name)),
        ("Folder", esc(str(e.path.parent))),
        ("Size", human_bytes(e.size)),
        ("Modified", _when(e.mtime)),
        ("Last used", _when(e.last_used)),
    ]
    if e.status == "ok":
        rows += [("Format", esc(e.format or "-")), ("Precision", esc(e.dtype or "-"))]
        if e.params:
            rows.append(("Parameters", human_count(e.params)))
        if e.variant:
            rows.append(("Variant", esc(e.variant)))
        if e.lora_text:
            rows.append(("LoRA", esc(e.lora_text)))
        if e.lora is not None and e.lora.control is not None:
            rows.append(("Control", esc(CONTROL_WORDS[e.lora.control])))
        if e.lora is not None and e.lora.trained_scale:
            rows.append(("Trained scale", esc(trained_scale_text(e.lora.trained_scale))))
    rows += hash_rows(e)
    out = ["<table cellspacing=0 cellpadding=2>"]
    out += [
        f"<tr><td style='color:{col['muted']};padding-right:10px'>{k}</td><td>{v}</td></tr>" for k, v in rows
    ]
    out.append("</table>")
    out.append(duplicate_html(dup))
    if e.trigger_words:
        words = "&nbsp; ".join(
            f"<span style='background:{col['chip_bg']};color:{col['chip_fg']}'>&nbsp;{esc(w)}&nbsp;</span>"
            for w in e.trigger_words
        )
        out.append(f"<p><b>Trigger words</b><br>{words}</p>")
    if e.components:
        out.append("<p><b>Components</b></p><table width='100%' cellspacing=0 cellpadding=3>")
        out.append(
            f"<tr style='color:{col['muted']}'><td>part</td><td>family</td><td>dtype</td>"
            "<td align=right>size</td></tr>"
        )
        for c in e.components:
            out.append(
                f"<tr><td>{kind_text(c.role)}</td><td>{esc(c.family)}</td><td>{esc(c.dtype)}</td>"
                f"<td align=right>{human_bytes(c.bytes)}</td></tr>"
            )
        out.append("</table>")
    if e.error:
        out.append(f"<p style='color:{col['error']}'><b>Cannot be read.</b> {esc(e.error)}</p>")
    for w in e.warnings:  # a note explains an ordinary file: muted, not amber
        if is_note(w):
            out.append(f"<p style='color:{col['muted']};margin:2px'>ⓘ {esc(w.removeprefix(NOTE_PREFIX))}</p>")
        else:
            out.append(f"<p style='color:{col['warn']};margin:2px'>⚠ {esc(w)}</p>")
    if e.record is not None and is_sparse_demo(e.record.get("metadata")):
        out.append(
            f"<p style='color:{col['info']}'>Demo file: real layout and shapes, but no weights (a sparse "
            "file). Browse it; load the tiny demo checkpoint instead.</p>"
        )
    return "".join(out)


class FitBox(QGroupBox):
    """Fits / partially / no: the selected model's bytes per component vs free memory."""

    def __init__(self, monitor: MemoryMonitor, parent: QWidget | None = None) -> None:
        super().__init__("Fit on this device", parent)
        self.monitor = monitor
        self.reserve = 0
        self.headroom: int | None = None  # the memory manager's inference headroom, when placing
        self.headroom_fixed = False  # the user fixed that headroom (it stands for the activations)
        self.entry: Entry | None = None
        self.verdict = QLabel("-")
        self.text = QLabel("")
        self.text.setWordWrap(True)
        self.dtype = QComboBox()
        for label, value in FIT_DTYPES:
            self.dtype.addItem(label, value)
        self.dtype.currentIndexChanged.connect(self.refresh)
        self.where = QLabel("")
        self.where.setObjectName("muted")
        self.where.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(self.verdict, 1)
        top.addWidget(QLabel("dtype"))
        top.addWidget(self.dtype)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.text)
        layout.addWidget(self.where)
        self.estimate: FitEstimate | None = None

    def show_entry(self, entry: Entry | None) -> None:
        self.entry = entry
        self.refresh()

    def refresh(self) -> None:
        import psutil

        e = self.entry
        if e is None:
            self.verdict.setText("-")
            self.text.setText("Select a model to see whether it fits.")
            self.where.setText("")
            return
        free, where = self.monitor.free_bytes()
        est = estimate_fit(
            e, free, where=where, on_gpu=self.monitor.has_gpu,
            ram_available=int(psutil.virtual_memory().available), reserve=self.reserve,
            dtype=self.dtype.currentData(), headroom=self.headroom if self.monitor.has_gpu else None,
            headroom_fixed=self.headroom_fixed and self.monitor.has_gpu,
        )  # fmt: skip
        self.estimate = est
        words = {"fits": "Fits", "partial": "Partially", "no": "Does not fit", "n/a": "No estimate"}
        self.verdict.setText(words[est.verdict])
        self.verdict.setObjectName(f"verdict_{est.verdict.replace('/', '')}")
        self.verdict.style().unpolish(self.verdict)
        self.verdict.style().polish(self.verdict)
        self.text.setText(est.text)
        note = "" if self.monitor.has_gpu else "No GPU found: estimated against system RAM. "
        kept = (
            f" ({human_bytes(self.headroom)} kept for activations)"
            if self.monitor.has_gpu and self.headroom
            else ""
        )
        self.where.setText(note + f"{human_bytes(free)} free or freeable on {where}{kept}.")


class DetailsPanel(QWidget):
    load_requested = Signal(object)  # Entry
    add_lora_requested = Signal(object)  # Entry

    def __init__(self, monitor: MemoryMonitor, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.entry: Entry | None = None
        self.model_loaded = False
        #: the other copies of an entry's data (the window gives the browser's duplicates)
        self.duplicate_of: Callable[[Entry], Duplicate | None] = lambda entry: None
        self.icon = QLabel()
        self.title = QLabel("Nothing selected")
        self.title.setStyleSheet("font-size: 13pt; font-weight: 600;")
        # one line, cut to the pane's width (see _elide_title): a long name never widens the window
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.title_text = "Nothing selected"
        self.title.installEventFilter(self)
        self.subtitle = QLabel("")
        self.subtitle.setObjectName("muted")
        self.preview = QLabel()
        self.preview.setFixedSize(112, 112)
        self.preview.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.preview.setStyleSheet("border: 1px solid #2a2f3a; border-radius: 8px;")
        self.body = QTextBrowser()
        self.body.setOpenLinks(False)
        self.fit = FitBox(monitor)
        self.load_button = QPushButton(icon("load", "#ffffff"), "Load")
        self.load_button.setObjectName("primary")
        self.load_button.setToolTip("Load the selected model (Ctrl+L or double-click)")
        self.load_button.clicked.connect(lambda: self.entry and self.load_requested.emit(self.entry))
        self.lora_button = QPushButton("Add to LoRA stack")
        set_icon(self.lora_button, "lora")
        self.lora_button.clicked.connect(lambda: self.entry and self.add_lora_requested.emit(self.entry))

        head_text = QVBoxLayout()
        head_text.addWidget(self.title)
        head_text.addWidget(self.subtitle)
        head_text.addStretch(1)
        head = QHBoxLayout()
        head.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        head.addLayout(head_text, 1)
        head.addWidget(self.preview)
        buttons = QHBoxLayout()
        buttons.addWidget(self.load_button)
        buttons.addWidget(self.lora_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addLayout(head)
        layout.addWidget(self.body, 1)
        layout.addWidget(self.fit)
        layout.addLayout(buttons)
        self.show_entry(None)

    def set_model_loaded(self, loaded: bool) -> None:
        self.model_loaded = loaded
        self._update_buttons()

    def show_entry(self, entry: Entry | None) -> None:
        self.entry = entry
        self.fit.show_entry(entry)
        self.fit.setVisible(entry is not None and entry.status != "error" and entry.group_kind in LOADABLE)
        self._update_buttons()
        if entry is None:
            self._set_title("Nothing selected")
            self.subtitle.setText("Pick a model in the browser")
            self.icon.clear()
            self.preview.clear()
            self.preview.setText("no preview")
            self.body.setHtml("")
            return
        badge = icon("error", "#ff6b6b") if entry.status == "error" else kind_icon(entry.group_kind)
        self.icon.setPixmap(badge.pixmap(32, 32))
        self._set_title(entry.title or entry.name)
        parts = [kind_text(entry.group_kind)]
        if entry.family:
            parts.append(entry.family)
        if entry.status == "pending":
            parts.append("reading…")
        elif entry.status == "error":
            parts.append("unreadable")
        self.subtitle.setText(" · ".join(parts))
        pixmap = QPixmap(str(entry.preview)) if entry.preview is not None else QPixmap()
        if pixmap.isNull():
            self.preview.clear()
            self.preview.setText("no preview")
        else:
            self.preview.setPixmap(pixmap.scaled(110, 110, Qt.AspectRatioMode.KeepAspectRatio,
                                                 Qt.TransformationMode.SmoothTransformation))  # fmt: skip
        self.body.setHtml(entry_html(entry, self.duplicate_of(entry)))

    def _set_title(self, text: str) -> None:
        self.title_text = text
        self._elide_title()

    def _elide_title(self) -> None:
        width = max(40, self.title.width())
        shown = self.title.fontMetrics().elidedText(self.title_text, Qt.TextElideMode.ElideMiddle, width)
        self.title.setText(shown)
        self.title.setToolTip(self.title_text if shown != self.title_text else "")

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.title and event.type() == QEvent.Type.Resize:
            self._elide_title()  # (the label's own size: set by the layout after the pane's)
        return super().eventFilter(watched, event)

    def _update_buttons(self) -> None:
        e = self.entry
        ok = e is not None and e.status == "ok"
        self.load_button.setEnabled(ok and e is not None and e.kind in LOADABLE)
        self.lora_button.setEnabled(ok and e is not None and e.kind == "lora" and self.model_loaded)
        if e is not None and e.kind == "lora" and not self.model_loaded:
            self.lora_button.setToolTip("Load a checkpoint first")
        else:
            self.lora_button.setToolTip(
                "Add the selected LoRA to the loaded model's stack (or drag it there)"
            )
