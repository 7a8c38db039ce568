"""The window's panels as docks: closable, floatable and tabbable, each inside a scroll area so a
small screen never pushes a control out of reach, with a default layout that fits 1280 x 720
logical pixels (1920 x 1080 at 150 %, a 1366 x 768 laptop) and the user's layout and window size
remembered in the settings.

The picture viewer is the central widget; around it:

- left: the library (browser) with the selected file's details below;
- right: Generate, with the LoRA stack and the loaded models (tabbed) below;
- bottom (under the viewer only): the gallery beside the memory plot, the test run tabbed with it.
"""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QSettings, QSize, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QDockWidget, QFrame, QMainWindow, QScrollArea, QWidget

Area = Qt.DockWidgetArea
#: key, title, default area (the View menu lists them in this order)
PANELS: tuple[tuple[str, str, Area], ...] = (
    ("library", "Library", Area.LeftDockWidgetArea),
    ("details", "Details", Area.LeftDockWidgetArea),
    ("generate", "Generate", Area.RightDockWidgetArea),
    ("lora", "LoRA stack", Area.RightDockWidgetArea),
    ("loaded", "Loaded models", Area.RightDockWidgetArea),
    ("gallery", "Gallery", Area.BottomDockWidgetArea),
    ("memory", "Memory", Area.BottomDockWidgetArea),
    ("testrun", "Test run", Area.BottomDockWidgetArea),
)
MAX_MIN_WIDTH = 340
#: the right column (Generate and the LoRA strengths) is the widest: no sideways scrolling there
WIDE = {"generate": 400, "lora": 400, "loaded": 400}
_STATE_VERSION = 2  # bump when the set of docks changes: an old saved state is then ignored
_GEOMETRY, _STATE = "window/geometry", "window/state"


def scrolled(widget: QWidget, cap: int = MAX_MIN_WIDTH) -> QScrollArea:
    """``widget`` in a frameless scroll area: its minimum size no longer sets the window's."""
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidget(widget)
    # as wide as the panel needs up to a side column's width (no sideways scrolling in normal use)
    bar = area.verticalScrollBar().sizeHint().width()
    area.setMinimumSize(min(widget.minimumSizeHint().width() + bar + 2, cap), 60)
    return area


def initial_size(window: QWidget) -> QSize:
    """A first run's window: 1500 x 940, or the screen's free area when that is smaller."""
    screen = window.screen() or QGuiApplication.primaryScreen()
    free = screen.availableGeometry().size() if screen is not None else QSize(1500, 940)
    return QSize(min(1500, free.width()), min(940, free.height()))


class DockLayout:
    """Builds the docks of ``window`` and puts them back where they belong."""

    def __init__(self, window: QMainWindow, panels: dict[str, QWidget]) -> None:
        self.window = window
        self.docks: dict[str, QDockWidget] = {}
        self.extra: list[tuple[str, Area, str]] = []  # docks added later: key, area, tabbed with
        window.setDockNestingEnabled(True)
        window.setCorner(Qt.Corner.BottomLeftCorner, Area.LeftDockWidgetArea)
        window.setCorner(Qt.Corner.BottomRightCorner, Area.RightDockWidgetArea)
        for key, title, area in PANELS:
            dock = QDockWidget(title, window)
            dock.setObjectName(f"dock_{key}")
            dock.setWidget(scrolled(panels[key], WIDE.get(key, MAX_MIN_WIDTH)))
            dock.setFeatures(
                QDockWidget.DockWidgetFeature.DockWidgetMovable
                | QDockWidget.DockWidgetFeature.DockWidgetFloatable
                | QDockWidget.DockWidgetFeature.DockWidgetClosable
            )
            window.addDockWidget(area, dock)
            self.docks[key] = dock
        self.arrange()

    def add(self, key: str, title: str, widget: QWidget, area: Area, tab_with: str) -> QDockWidget:
        """A panel another module adds (the queue): a dock like the others, tabbed with ``tab_with``
        by the default layout, listed in the View menu when added before the menus are built."""
        dock = QDockWidget(title, self.window)
        dock.setObjectName(f"dock_{key}")
        dock.setWidget(scrolled(widget, WIDE.get(tab_with, MAX_MIN_WIDTH)))
        dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetMovable
            | QDockWidget.DockWidgetFeature.DockWidgetFloatable
            | QDockWidget.DockWidgetFeature.DockWidgetClosable
        )
        self.window.addDockWidget(area, dock)
        self.window.tabifyDockWidget(self.docks[tab_with], dock)
        self.docks[tab_with].raise_()
        self.docks[key] = dock
        self.extra.append((key, area, tab_with))
        return dock

    def arrange(self) -> None:
        """The default layout (also View ▸ Reset layout): every panel docked and shown."""
        w, d = self.window, self.docks
        for key, _title, area in PANELS:
            dock = d[key]
            dock.setFloating(False)
            w.removeDockWidget(dock)
            w.addDockWidget(area, dock)
            dock.show()
        w.splitDockWidget(d["library"], d["details"], Qt.Orientation.Vertical)
        w.splitDockWidget(d["generate"], d["lora"], Qt.Orientation.Vertical)
        w.tabifyDockWidget(d["lora"], d["loaded"])
        width, height = w.width(), w.height()
        roomy = width >= 1700  # the memory plot needs width: on smaller screens it is a tab
        if roomy:
            w.splitDockWidget(d["gallery"], d["memory"], Qt.Orientation.Horizontal)
        else:
            w.tabifyDockWidget(d["gallery"], d["memory"])
        w.tabifyDockWidget(d["memory"], d["testrun"])
        for key, area, tab_with in self.extra:
            d[key].setFloating(False)
            w.removeDockWidget(d[key])
            w.addDockWidget(area, d[key])
            d[key].show()
            w.tabifyDockWidget(d[tab_with], d[key])
            d[tab_with].raise_()  # the panel it joins stays in front
        d["lora"].raise_()
        (d["memory"] if roomy else d["gallery"]).raise_()
        side = max(280, min(460, width // 4))
        w.resizeDocks([d["library"], d["generate"]], [side, side + 80], Qt.Orientation.Horizontal)
        w.resizeDocks([d["library"], d["details"]], [height // 2, height // 3], Qt.Orientation.Vertical)
        w.resizeDocks([d["generate"], d["lora"]], [height // 2, height // 3], Qt.Orientation.Vertical)
        w.resizeDocks([d["gallery"]], [max(220, height * 3 // 10)], Qt.Orientation.Vertical)
        center = max(400, width - 2 * side - 80)
        if roomy:
            w.resizeDocks(
                [d["gallery"], d["memory"]], [center * 2 // 5, center * 3 // 5], Qt.Orientation.Horizontal
            )

    # -- remembered between runs -----------------------------------------------------------------
    def save(self, store: QSettings) -> None:
        store.setValue(_GEOMETRY, self.window.saveGeometry())
        store.setValue(_STATE, self.window.saveState(_STATE_VERSION))

    def restore(self, store: QSettings) -> bool:
        """The saved size and layout, if any (False: none saved, or from an older set of docks)."""
        geometry, state = store.value(_GEOMETRY), store.value(_STATE)
        if isinstance(geometry, QByteArray | bytes):
            self.window.restoreGeometry(QByteArray(geometry))
        if isinstance(state, QByteArray | bytes):
            return bool(self.window.restoreState(QByteArray(state), _STATE_VERSION))
        return False
