"""Look and feel: the dark/light theme, icons drawn from ``app/resources/``, and text formatting."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from PySide6.QtCore import QByteArray, QObject, QSize, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPalette, QPixmap
from PySide6.QtSvg import QSvgRenderer
from PySide6.QtWidgets import QApplication

from core.units import decimal_size

RESOURCES = Path(__file__).resolve().parents[1] / "resources"
DARK_ICON = "#c9d1e3"
LIGHT_ICON = "#475467"
KIND_COLORS = {
    "checkpoint": "#748ffc",
    "diffusion_model": "#9775fa",
    "lora": "#f783ac",
    "vae": "#63e6be",
    "text_encoder": "#ffd43b",
    "controlnet": "#74c0fc",
    "upscale_model": "#a9e34b",
    "preprocessor_model": "#f783ac",
    "image_encoder": "#38d9a9",
    "ip_adapter": "#e599f7",
    "embedding": "#ffa94d",
    "unknown": "#868e96",
}
_state = {"icon_color": DARK_ICON}
_FUSION = "loadoutFusion"  # the application's property: apply_theme set the Fusion style
ICON_PROPERTY = "loadoutIcon"


def resource(name: str) -> Path:
    return RESOURCES / name


def _render(svg: str, size: int) -> QPixmap:
    renderer = QSvgRenderer(QByteArray(svg.encode()))
    pixmap = QPixmap(QSize(size, size))
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    renderer.render(painter)
    painter.end()
    return pixmap


@cache
def _icon(name: str, color: str) -> QIcon:
    path = resource(f"icons/{name}.svg")
    if not path.is_file():
        return QIcon()
    svg = path.read_text().replace("currentColor", color)
    icon = QIcon()
    for size in (16, 24, 32, 48):
        icon.addPixmap(_render(svg, size))
    return icon


def icon(name: str, color: str | None = None) -> QIcon:
    """A toolbar/list icon from ``app/resources/icons``, drawn in the theme's (or the given) color."""
    return _icon(name, color or _state["icon_color"])


def set_icon(target: QObject, name: str) -> None:
    """Give a button or action a theme-colored icon that :func:`refresh_icons` redraws."""
    target.setIcon(icon(name))  # type: ignore[attr-defined]
    target.setProperty(ICON_PROPERTY, name)


def refresh_icons(root: QObject) -> None:
    """Redraw the theme-colored icons under ``root`` (after the theme changed)."""
    for obj in [root, *root.findChildren(QObject)]:
        name = obj.property(ICON_PROPERTY)
        if name and hasattr(obj, "setIcon"):
            obj.setIcon(icon(str(name)))


def colors() -> dict[str, str]:
    """Text colors for rich text (HTML) in the current theme."""
    if is_dark():
        return {"muted": "#8a94a6", "warn": "#fcc419", "error": "#ff8787", "info": "#74c0fc",
                "chip_bg": "#2b3350", "chip_fg": "#dbe4ff"}  # fmt: skip
    return {"muted": "#667085", "warn": "#b54708", "error": "#c92a2a", "info": "#1c7ed6",
            "chip_bg": "#e7ecff", "chip_fg": "#2b3a8c"}  # fmt: skip


def kind_icon(kind: str) -> QIcon:
    name = kind if resource(f"icons/{kind}.svg").is_file() else "unknown"
    return icon(name, KIND_COLORS.get(kind, KIND_COLORS["unknown"]))


def app_icon() -> QIcon:
    path = resource("loadout.svg")
    icon_ = QIcon()
    if path.is_file():
        svg = path.read_text()
        for size in (16, 32, 64, 128, 256):
            icon_.addPixmap(_render(svg, size))
    return icon_


def dark_palette() -> QPalette:
    p = QPalette()
    roles = {
        QPalette.ColorRole.Window: "#16181d",
        QPalette.ColorRole.WindowText: "#d8dee9",
        QPalette.ColorRole.Base: "#1a1d23",
        QPalette.ColorRole.AlternateBase: "#1e2128",
        QPalette.ColorRole.ToolTipBase: "#242833",
        QPalette.ColorRole.ToolTipText: "#e5e9f0",
        QPalette.ColorRole.Text: "#d8dee9",
        QPalette.ColorRole.Button: "#2a2f3a",
        QPalette.ColorRole.ButtonText: "#e5e9f0",
        QPalette.ColorRole.BrightText: "#ff8787",
        QPalette.ColorRole.Highlight: "#3b5bdb",
        QPalette.ColorRole.HighlightedText: "#ffffff",
        QPalette.ColorRole.Link: "#74c0fc",
        QPalette.ColorRole.PlaceholderText: "#6b7385",
    }
    for role, color in roles.items():
        p.setColor(role, QColor(color))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor("#5c6373"))
    return p


def apply_theme(app: QApplication, dark: bool) -> None:
    """Fusion style with the dark palette and stylesheet, or the light ones. Each is set only when
    it changes: setting them re-polishes every widget, and the same theme again changes nothing
    (a second window, the settings saved without a theme change)."""
    if not app.property(_FUSION):  # (with a style sheet, app.style() is the sheet's own style)
        app.setStyle("Fusion")
        app.setProperty(_FUSION, True)
    _state["icon_color"] = DARK_ICON if dark else LIGHT_ICON
    palette = dark_palette() if dark else app.style().standardPalette()
    if app.palette() != palette:
        app.setPalette(palette)
    qss = resource("dark.qss" if dark else "light.qss")
    text = qss.read_text() if qss.is_file() else ""
    sheet = text.replace("{icons}", (RESOURCES / "icons").as_posix())
    if app.styleSheet() != sheet:
        app.setStyleSheet(sheet)


def is_dark() -> bool:
    return _state["icon_color"] == DARK_ICON


# --- text --------------------------------------------------------------------------------------
def human_bytes(n: int | float | None) -> str:
    """A size for the window (core.units.decimal_size); "-" for an unknown one."""
    return "-" if n is None else decimal_size(n)


def human_count(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f} B"
    if n >= 1e6:
        return f"{n / 1e6:.1f} M"
    if n >= 1e3:
        return f"{n / 1e3:.1f} K"
    return str(n)


def kind_text(kind: str) -> str:
    return {"diffusion_model": "diffusion model", "text_encoder": "text encoder", "lora": "LoRA"}.get(
        kind, kind.replace("_", " ")
    )
