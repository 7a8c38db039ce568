"""The live memory plot and the engine's event list.

``MemoryPlot(monitor)`` samples the :class:`MemoryMonitor` on a timer (10 Hz) and scrolls the last
minutes: system RAM used, this process's RSS and, with a GPU, device used / reserved / allocated,
with the peak marked. Engine events become labelled vertical markers through one method,
:meth:`MemoryPlot.add_event`; :class:`EventList` lists them with their reasons.
"""

from __future__ import annotations

import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QSplitter,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.backend.messages import EngineEvent
from app.backend.monitor import MemoryMonitor
from app.backend.placement import PlacementInfo
from app.gui.theme import human_bytes, is_dark
from app.gui.widgets import ElidedLabel

GB = 1e9
EVENT_COLORS = {
    "load": "#69db7c",
    "partial_load": "#a9e34b",
    "unload": "#ffa94d",
    "partial_unload": "#ffc078",
    "keep": "#868e96",
    "refuse": "#ff6b6b",
    "settings": "#91a7ff",
    "interrupt": "#ff6b6b",
    "lora": "#f783ac",
    "run": "#74c0fc",
    "error": "#ff6b6b",
    "phase": "#e599f7",
    "dtype": "#91a7ff",
}
#: generation phases as shaded bands on the plot (the band runs until the next phase or the end)
PHASE_COLORS = {
    "encode": "#e599f733", "sample": "#74c0fc2b", "decode": "#ffd43b2b",
    "refine encode": "#e599f733", "refine": "#69db7c2b",  # the SDXL refiner hand-off
}  # fmt: skip
#: the plot's marker tags (the event list has the full text, the marker's tooltip the reason)
SHORT_LABELS = {
    "load": "load",
    "partial_load": "partial",
    "unload": "offload",
    "partial_unload": "evict",
    "keep": "keep",
    "refuse": "refused",
    "lora": "LoRA",
    "run": "run",
    "interrupt": "stop",
    "settings": "settings",
    "dtype": "dtype",
}
#: (attribute of MemorySample, legend name, color, dashed, filled)
SERIES = (
    ("ram_used", "System RAM used", "#748ffc", False, False),
    ("rss", "Loadout (RSS)", "#f783ac", False, True),
    ("gpu_used", "GPU used (device)", "#69db7c", False, False),
    ("gpu_reserved", "GPU reserved (Loadout)", "#38d9a9", True, False),
    ("gpu_allocated", "GPU allocated (Loadout)", "#ffd43b", False, False),
)


class MemoryPlot(pg.PlotWidget):
    legend_changed = Signal(str)  # the legend's HTML, after the traces change

    def __init__(self, monitor: MemoryMonitor, *, interval_ms: int = 100, window_s: float = 120.0) -> None:
        dark = is_dark()
        super().__init__(background="#14161b" if dark else "#ffffff")
        self.monitor = monitor
        self.window_s = window_s
        self.markers: list[tuple[float, pg.GraphicsObject]] = []
        self.open_phase: pg.LinearRegionItem | None = None
        item = self.getPlotItem()
        item.showGrid(x=True, y=True, alpha=0.15)
        item.setLabel("left", "memory", units="B")
        item.setLabel("bottom", "time", units="s")
        item.getAxis("bottom").enableAutoSIPrefix(False)  # seconds stay seconds, never "time (ks)"
        item.setMenuEnabled(False)
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        # no legend inside the plot: a line of text above it (MemoryPanel.legend) never covers the traces
        self.grouped: tuple[float, pg.InfiniteLine, list[str]] | None = None  # the last marker
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.simulated = False
        self.gpu_view = pg.ViewBox(enableMouse=False)  # the right axis (a simulated card)
        item.scene().addItem(self.gpu_view)
        item.getAxis("right").linkToView(self.gpu_view)
        self.gpu_view.setXLink(item)
        item.vb.sigResized.connect(lambda: self.gpu_view.setGeometry(item.vb.sceneBoundingRect()))
        self.build_curves()
        self.peak_line = pg.InfiniteLine(
            angle=0, pen=pg.mkPen("#f783ac", width=1, style=Qt.PenStyle.DotLine), movable=False,
            label="peak RSS", labelOpts={"position": 0.3, "color": "#f783ac", "anchors": [(0, 1), (0, 1)]},
        )  # fmt: skip
        item.addItem(self.peak_line)
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.tick)
        self.timer.start()
        self.tick()

    def build_curves(self, simulated: bool = False) -> None:
        """(Re)create the curves for what the monitor measures now (a GPU may come or go when the
        memory settings change). A simulated card has no allocator: only its use is drawn, against
        its own axis on the right (0 to the card's size: megabytes next to gigabytes of RAM)."""
        item = self.getPlotItem()
        for curve in self.curves.values():
            if item.legend is not None:
                item.legend.removeItem(curve)
            if curve.getViewBox() is self.gpu_view:
                self.gpu_view.removeItem(curve)
            else:
                item.removeItem(curve)
        self.curves = {}
        self.simulated = simulated
        for attr, name, color, dashed, filled in SERIES:
            if attr.startswith("gpu") and (not self.monitor.has_gpu or (simulated and attr != "gpu_used")):
                continue
            pen = pg.mkPen(color, width=2, style=Qt.PenStyle.DashLine if dashed else Qt.PenStyle.SolidLine)
            if simulated and attr == "gpu_used":
                curve = pg.PlotDataItem([], [], pen=pen, name="Simulated GPU used (right axis)")
                self.gpu_view.addItem(curve)
                if item.legend is not None:
                    item.legend.addItem(curve, curve.name())
            else:
                curve = item.plot([], [], pen=pen, name=name)
            if filled:
                curve.setFillLevel(0)
                curve.setBrush(pg.mkBrush(color + "33"))
            self.curves[attr] = curve
        if simulated:
            item.showAxis("right")
            item.setLabel("right", "simulated GPU", units="B")
            total = self.monitor.gpu.total() if self.monitor.gpu is not None else 1
            self.gpu_view.setYRange(0, total * 1.05, padding=0)
        else:
            item.hideAxis("right")
        if item.legend is not None:
            item.legend.setColumnCount(len(self.curves))
        self.legend_changed.emit(self.legend_html())

    def legend_html(self) -> str:
        """The traces' names in their colors, for the line above the plot."""
        parts = []
        for curve in self.curves.values():
            color = curve.opts["pen"].color().name()
            parts.append(f"<span style='color:{color}'>━</span>&nbsp;{curve.name()}")
        return " &nbsp; ".join(parts)

    def apply_theme(self) -> None:
        self.setBackground("#14161b" if is_dark() else "#ffffff")
        legend = self.getPlotItem().legend
        if legend is not None:
            legend.setLabelTextColor("#c9d1e3" if is_dark() else "#344054")

    def tick(self) -> None:
        self.monitor.sample()
        now = self.monitor.now()
        start = max(0.0, now - self.window_s)
        samples = [s for s in self.monitor.history if s.time >= start]
        if not samples:
            return
        t = np.fromiter((s.time for s in samples), float, len(samples))
        for attr, curve in self.curves.items():
            y = np.array([getattr(s, attr) or 0 for s in samples], dtype=float)
            curve.setData(t, y)
        self.peak_line.setPos(self.monitor.peak_rss)
        self.peak_line.label.setFormat(f"peak RSS {human_bytes(self.monitor.peak_rss)}")
        self.setXRange(start, max(now, start + min(60.0, self.window_s)), padding=0)
        if self.open_phase is not None:  # the running phase's band grows with time
            self.open_phase.setRegion((self.open_phase.getRegion()[0], now))
        while self.markers and self.markers[0][0] < now - self.monitor.history.maxlen / self.monitor.rate_hz:  # type: ignore[operator]
            self.removeItem(self.markers.pop(0)[1])

    def phase(self, at: float, name: str | None) -> None:
        """Start a shaded band for generation phase ``name`` at ``at`` (None: the phases ended),
        ending the band before it."""
        if self.open_phase is not None:
            start = self.open_phase.getRegion()[0]
            self.open_phase.setRegion((start, max(start, at)))
            self.open_phase = None
        color = PHASE_COLORS.get(name or "")
        if color is None:
            return
        band = pg.LinearRegionItem(
            values=(at, at), movable=False, brush=pg.mkBrush(color), pen=pg.mkPen(None)
        )
        band.setZValue(-10)
        self.addItem(band)
        self.open_phase = band
        self.markers.append((at, band))

    def add_event(self, at: float, label: str, reason: str, kind: str = "") -> None:
        """A labelled vertical marker at ``at`` (seconds on the monitor's clock); events closer than
        one draw share one marker: "load +2"."""
        near = max(self.timer.interval() / 1000, self.window_s / 600)
        if self.grouped is not None and abs(at - self.grouped[0]) < near:
            _at, line, labels = self.grouped
            labels.append(label)
            names = list(dict.fromkeys(labels))
            line.label.setFormat(" · ".join(names) if len(names) <= 2 else f"{names[0]} +{len(names) - 1}")
            line.setToolTip(f"{line.toolTip()}\n{reason}")
            return
        color = EVENT_COLORS.get(kind, "#adb5bd")
        position = (0.93, 0.81, 0.69, 0.57, 0.45)[len(self.markers) % 5]
        short = label if len(label) <= 30 else label[:29] + "…"
        line = pg.InfiniteLine(
            pos=at, angle=90, movable=False, pen=pg.mkPen(color, width=1, style=Qt.PenStyle.DashLine),
            label=short, labelOpts={"position": position, "color": color, "rotateAxis": None,
                                    "fill": pg.mkBrush("#14161bcc" if is_dark() else "#ffffffcc")},
        )  # fmt: skip
        line.setToolTip(reason)
        self.addItem(line)
        self.markers.append((at, line))
        self.grouped = (at, line, [short])


class WrapDelegate(QStyledItemDelegate):
    """Rows as tall as their wrapped text at the column's current width: a reason is never cut."""

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        view = self.parent()
        hint = super().sizeHint(option, index)
        if not isinstance(view, QTreeWidget) or index.column() != 1:
            return hint
        width = max(60, view.columnWidth(1) - 12)
        text = str(index.data() or "")
        rect = option.fontMetrics.boundingRect(QRect(0, 0, width, 100000), Qt.TextFlag.TextWordWrap, text)
        return QSize(hint.width(), max(hint.height(), rect.height() + 6))


class EventList(QTreeWidget):
    """Engine events, newest first, with the reason for each."""

    LIMIT = 500

    def __init__(self) -> None:
        super().__init__()
        self.setHeaderLabels(["Time", "What happened, and why"])
        self.setRootIsDecorated(False)
        self.setAlternatingRowColors(True)
        self.setWordWrap(True)
        self.setTextElideMode(Qt.TextElideMode.ElideNone)
        header = self.header()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setStretchLastSection(True)
        self.setItemDelegate(WrapDelegate(self))
        header.sectionResized.connect(lambda *_: self.doItemsLayout())

    def add_event(self, label: str, reason: str, kind: str) -> None:
        item = QTreeWidgetItem([time.strftime("%H:%M:%S"), f"{label}\n{reason}"])
        item.setToolTip(1, reason)
        color = EVENT_COLORS.get(kind)
        if color:
            item.setForeground(1, pg.mkBrush(color))
        self.insertTopLevelItem(0, item)
        while self.topLevelItemCount() > self.LIMIT:
            self.takeTopLevelItem(self.topLevelItemCount() - 1)


class MemoryPanel(QWidget):
    """The plot, its note (device, or "no GPU found"), peaks and the event list."""

    def __init__(
        self, monitor: MemoryMonitor, placement: PlacementInfo | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.monitor = monitor
        self.plot = MemoryPlot(monitor)
        self.events = EventList()
        self.note = ElidedLabel()  # one line each (the tooltip has it all): the plot keeps its height
        self.peaks = ElidedLabel()
        self.peaks.setObjectName("muted")
        self.window = QComboBox()
        for label, seconds in (("Last minute", 60), ("Last 2 minutes", 120), ("Last 5 minutes", 300)):
            self.window.addItem(label, seconds)
        self.window.setCurrentIndex(1)
        self.window.currentIndexChanged.connect(
            lambda: setattr(self.plot, "window_s", self.window.currentData())
        )
        self.legend = QLabel(self.plot.legend_html(), wordWrap=True)
        self.legend.setObjectName("muted")
        self.plot.legend_changed.connect(self.legend.setText)
        top = QHBoxLayout()
        heads = QVBoxLayout()
        heads.setSpacing(0)
        heads.addWidget(self.note)
        heads.addWidget(self.peaks)
        top.addLayout(heads, 1)
        top.addWidget(self.window)
        plot_box = QWidget()
        plot_layout = QVBoxLayout(plot_box)
        plot_layout.setContentsMargins(0, 0, 0, 0)
        plot_layout.setSpacing(0)
        plot_layout.addWidget(self.legend)
        plot_layout.addWidget(self.plot, 1)
        split = QSplitter(Qt.Orientation.Horizontal)
        self.split = split
        split.addWidget(plot_box)
        split.addWidget(self.events)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 1)
        split.setSizes([500, 380])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addWidget(split, 1)
        self.plot.timer.timeout.connect(self._update_peaks)
        self.set_placement(placement)

    def resizeEvent(self, event: QResizeEvent) -> None:
        """Plot and decisions side by side where the panel is wide, one above the other where it is
        tall and narrow (a side dock): the decisions never read one or two words a line."""
        super().resizeEvent(event)
        wide = self.width() >= 1.6 * self.height() or self.width() >= 900
        orientation = Qt.Orientation.Horizontal if wide else Qt.Orientation.Vertical
        if self.split.orientation() != orientation:
            self.split.setOrientation(orientation)

    def set_placement(self, placement: PlacementInfo | None) -> None:
        """Say what is measured: the GPU (real or simulated) and its VRAM state, or no GPU."""
        device = self.monitor.device
        if placement is None and device is not None:
            text = tip = f"GPU: {device.label}"
            self.note.setObjectName("muted")
        elif placement is None or not placement.active:
            text = "No GPU found: showing system RAM and Loadout's memory; models compute on the CPU."
            tip = text
            if placement is not None and device is not None:
                text = f"GPU: {device.label} · not used"
                tip = placement.reason
            self.note.setObjectName("warning")
        else:
            text = f"{placement.label} · {placement.vram_state}"
            tip = placement.reason
            if placement.vram_state == "no-vram":  # Automatic on a small card: say why nothing stays
                text += (
                    " · layers stream, nothing stays placed (Settings › Memory: Normal VRAM keeps what fits)"
                )
            if placement.simulated:
                tip += (
                    ". No GPU here: the memory manager plans, evicts and streams for a card of this size, "
                    "and the math runs on the CPU (Settings > Memory)."
                )
            self.note.setObjectName("muted")
        self.note.setText(text)
        self.note.setToolTip(tip)
        self.note.style().unpolish(self.note)
        self.note.style().polish(self.note)
        simulated = placement is not None and placement.simulated
        if simulated != self.plot.simulated or (self.monitor.has_gpu != ("gpu_used" in self.plot.curves)):
            self.plot.build_curves(simulated)
        elif simulated and self.monitor.gpu is not None:  # another card size: rescale its axis
            self.plot.gpu_view.setYRange(0, self.monitor.gpu.total() * 1.05, padding=0)
        self._update_peaks()

    def add_event(self, event: EngineEvent) -> None:
        at = event.time - self.monitor.start  # both on time.monotonic()
        if event.kind in ("phase", "phase_end"):  # a generation phase: a band, listed but not marked
            self.plot.phase(at, event.label if event.kind == "phase" else None)
            if event.kind == "phase":
                self.events.add_event(f"generate: {event.label}", event.reason, event.kind)
            return
        self.plot.add_event(
            at, SHORT_LABELS.get(event.kind, event.kind), f"{event.label}: {event.reason}", event.kind
        )
        self.events.add_event(event.label, event.reason, event.kind)

    def _update_peaks(self) -> None:
        m = self.monitor
        text = f"peak RSS {human_bytes(m.peak_rss)} · peak RAM used {human_bytes(m.peak_ram)}"
        if m.peak_gpu is not None:
            text += f" · peak GPU {human_bytes(m.peak_gpu)}"
        self.peaks.setText(text)
