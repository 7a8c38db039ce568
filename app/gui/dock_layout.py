"""The window's panels as docks: closable, floatable and tabbable, each inside a scroll area so a
small screen never pushes a control out of reach, with a default layout that fits 1280 x 720
logical pixels (1920 x 1080 at 150 %, a 1366 x 768 laptop) and the user's layout and window size
remembered in the settings.

The picture viewer is the central widget; around it:

- left: the library (browser), with the LoRA stack below it (the loaded models and the selected
  file's details tabbed with it);
- right: Generate, the whole height: the model in use, the prompts, the settings (they scroll),
  and the Generate button pinned at its foot (the queue tabbed with it);
- bottom (under the viewer only): the gallery (the recent pictures, in front), the memory plot
  and the test run tabbed with it (beside it on wide screens).

Library, Memory and Queue also get the whole window as workspaces (app/gui/workspaces.py).
"""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QEvent, QMargins, QSettings, QSize, Qt
from PySide6.QtGui import QGuiApplication, QResizeEvent
from PySide6.QtWidgets import QDockWidget, QFrame, QMainWindow, QScrollArea, QSizePolicy, QWidget

Area = Qt.DockWidgetArea
#: key, title, default area (the View menu lists them in this order)
PANELS: tuple[tuple[str, str, Area], ...] = (
    ("library", "Library", Area.LeftDockWidgetArea),
    ("details", "Details", Area.LeftDockWidgetArea),
    ("lora", "LoRA stack", Area.LeftDockWidgetArea),
    ("loaded", "Loaded models", Area.LeftDockWidgetArea),
    ("generate", "Generate", Area.RightDockWidgetArea),
    ("gallery", "Gallery", Area.BottomDockWidgetArea),
    ("memory", "Memory", Area.BottomDockWidgetArea),
    ("testrun", "Test run", Area.BottomDockWidgetArea),
)
MAX_MIN_WIDTH = 340
#: the right column (Generate and the LoRA strengths) is the widest: no sideways scrolling there
WIDE = {"generate": 400, "lora": 400, "loaded": 400}
_STATE_VERSION = 3  # bump when the set of docks changes: an old saved state is then ignored
_GEOMETRY, _STATE = "window/geometry", "window/state"


class Fitted(QWidget):
    """Holds a panel inside its dock's scroll area, filling it, and tells the scroll area only the
    panel's *minimum* size. A panel with a word-wrapped label reports height-for-width, and a
    scroll area then lays it out at its preferred height: its foot (the Generate button, the
    gallery, the LoRA sliders) scrolled out of a dock that had room for all of it at its minimum."""

    def __init__(self, panel: QWidget) -> None:
        super().__init__()
        self.panel = panel
        panel.setParent(self)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(False)
        self.setSizePolicy(policy)

    def minimumSizeHint(self) -> QSize:
        return self.panel.minimumSizeHint().expandedTo(self.panel.minimumSize())

    def sizeHint(self) -> QSize:
        return self.panel.sizeHint()

    def resizeEvent(self, event: QResizeEvent) -> None:
        self.panel.setGeometry(self.rect())

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:  # the panel's minimum changed
            self.updateGeometry()
        return super().event(event)


def scrolled(widget: QWidget, cap: int = MAX_MIN_WIDTH) -> QScrollArea:
    """``widget`` in a frameless scroll area: its minimum size no longer sets the window's."""
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidget(Fitted(widget))
    # as wide as the panel needs up to a side column's width (no sideways scrolling in normal use)
    bar = area.verticalScrollBar().sizeHint().width()
    area.setMinimumSize(min(widget.minimumSizeHint().width() + bar + 2, cap), 60)
    return area


def panel_of(area: QScrollArea) -> QWidget:
    """The panel a dock's scroll area holds."""
    fitted = area.widget()
    assert isinstance(fitted, Fitted)
    return fitted.panel


#: the window manager's frame (title bar and borders) before Qt knows it: a first window is sized so
#: that the frame fits too (openbox, KWin and Mutter's title bars are 20-40 px)
FRAME_ALLOWANCE = QMargins(8, 40, 8, 8)
DEFAULT_SIZE = QSize(1500, 940)


def initial_size_for(free: QSize, frame: QMargins = FRAME_ALLOWANCE) -> QSize:
    """A first run's window on a screen with ``free`` available space: 1500 x 940, or the free area
    less the window frame when that is smaller."""
    room = QSize(free.width() - frame.left() - frame.right(), free.height() - frame.top() - frame.bottom())
    return QSize(min(DEFAULT_SIZE.width(), room.width()), min(DEFAULT_SIZE.height(), room.height()))


def initial_size(window: QWidget) -> QSize:
    """A first run's window on the screen it will open on (see :func:`initial_size_for`)."""
    screen = window.screen() or QGuiApplication.primaryScreen()
    free = screen.availableGeometry().size() if screen is not None else DEFAULT_SIZE
    return initial_size_for(free)


def keep_on_screen(window: QWidget) -> None:
    """Once shown (the frame is known): if the window with its frame is larger than the screen's
    available area or hangs off it, shrink it and move it fully onto the screen. A restored size
    from a larger screen and a window manager's placement are corrected alike."""
    screen = window.screen() or QGuiApplication.primaryScreen()
    if screen is None or window.isMaximized() or window.isFullScreen():
        return
    if QGuiApplication.platformName() == "offscreen":
        return  # no window manager, and a nominal 800 x 800 screen: tests size their windows freely
    free = screen.availableGeometry()
    frame, inner = window.frameGeometry(), window.geometry()
    extra_w, extra_h = frame.width() - inner.width(), frame.height() - inner.height()
    width = min(inner.width(), free.width() - extra_w)
    height = min(inner.height(), free.height() - extra_h)
    if (width, height) != (inner.width(), inner.height()):
        window.resize(max(width, window.minimumWidth()), max(height, window.minimumHeight()))
    frame = window.frameGeometry()
    x = min(max(frame.x(), free.x()), free.right() + 1 - frame.width())
    y = min(max(frame.y(), free.y()), free.bottom() + 1 - frame.height())
    if (x, y) != (frame.x(), frame.y()):
        window.move(max(x, free.x()), max(y, free.y()))


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

    def bring(self, key: str) -> None:
        """Show the ``key`` dock (closed or tabbed behind another) in front."""
        self.docks[key].show()
        self.docks[key].raise_()

    def arrange(self) -> None:
        """The default layout (also View ▸ Reset layout): every panel docked and shown."""
        w, d = self.window, self.docks
        size = w.size()  # the panels side by side on the way may push the window wider: undone below
        for key, _title, area in PANELS:
            dock = d[key]
            dock.setFloating(False)
            w.removeDockWidget(dock)
            w.addDockWidget(area, dock)
            dock.show()
        # left: the library over the LoRA stack (details and loaded models tabbed with it); right:
        # Generate alone, the whole height, its button pinned at its foot
        w.splitDockWidget(d["library"], d["lora"], Qt.Orientation.Vertical)
        w.tabifyDockWidget(d["lora"], d["loaded"])
        w.tabifyDockWidget(d["lora"], d["details"])
        width, height = size.width(), size.height()
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
        d["gallery"].raise_()  # the recent pictures beside the picture: the loop's other half
        d["library"].raise_()
        if w.size() != size:
            w.resize(size)
        side = max(280, min(460, width // 4))
        w.resizeDocks([d["library"], d["generate"]], [side, side + 80], Qt.Orientation.Horizontal)
        # the LoRA stack as tall as one card's two strengths needs, the library the rest (the
        # more files listed the better; the stack scrolls when it holds several)
        stack = d["lora"].widget()
        need = panel_of(stack).minimumSizeHint().height() if isinstance(stack, QScrollArea) else height // 2
        layout = w.layout()
        if layout is not None:
            layout.activate()  # the docks' heights as laid out now
        column = d["library"].height() + d["lora"].height()
        column = column if column > 200 else height - 120
        lora = min(column // 2, need + 70)  # its title and the tabs under it too
        w.resizeDocks([d["library"], d["lora"]], [column - lora, lora], Qt.Orientation.Vertical)
        # the gallery: at least one row of thumbnails with their names (and its title and tabs)
        gallery = d["gallery"].widget()
        row = gallery.widget().minimumSizeHint().height() if isinstance(gallery, QScrollArea) else 100
        w.resizeDocks([d["gallery"]], [max(row + 70, height // 4)], Qt.Orientation.Vertical)
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
