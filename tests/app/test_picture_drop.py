"""Dropping a hostile picture on the Generate panel: an error shown or the fields filled from the
values in range, never an exception escaping Qt, an overflowing spin box or a half-filled panel."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.gui.generate_panel import GeneratePanel
from core.errors import LoadoutError
from tests.fixtures.png_files import text, write_png


@pytest.fixture
def panel(qtbot: QtBot) -> GeneratePanel:
    p = GeneratePanel()
    qtbot.addWidget(p)
    return p


def test_values_out_of_range_leave_their_fields_and_are_named(panel: GeneratePanel, tmp_path: Path) -> None:
    panel.seed.setText("7")
    panel.steps.setValue(30)
    panel.cfg.setValue(6.0)
    png = write_png(
        tmp_path / "p.png",
        text("parameters", "a fox\nSteps: 99999999999999999999, Sampler: Euler, CFG scale: nan, Seed: -5, "
                           "Size: 768x512"),
    )  # fmt: skip
    panel.read_picture(png)
    assert panel.prompt.toPlainText() == "a fox"
    assert (panel.seed.text(), panel.steps.value(), panel.cfg.value()) == ("7", 30, 6.0)  # not 30 for nan
    assert (panel.width_.value(), panel.height_.value()) == (768, 512)
    status = panel.status.text()
    assert "Steps ignored" in status and "CFG scale ignored" in status and "Seed ignored" in status


@pytest.mark.parametrize(
    "make",
    [
        lambda d: write_png(d / "bomb.png", text("parameters", "x\nSteps: 2"), width=100_000, height=100_000,
                            pixels=False),
        lambda d: write_png(d / "huge-text.png", text("parameters", "y" * (2 << 20))),
        lambda d: (d / "junk.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really") and d / "junk.png",
    ],
)  # fmt: skip
def test_hostile_pictures_fill_or_say_why(
    panel: GeneratePanel, qtbot: QtBot, tmp_path: Path, make: object
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    errors: list[LoadoutError] = []
    panel.error.connect(errors.append)
    panel.read_picture(path)
    assert errors or panel.prompt.toPlainText() == "x"
    assert all(isinstance(e, LoadoutError) for e in errors)


def test_a_900_kb_single_line_prompt_is_cut_with_a_message_not_laid_out(
    panel: GeneratePanel, tmp_path: Path
) -> None:
    from app.gui.generate_panel import PROMPT_CHARS

    prompt = ("a fox, " * (900_000 // 7)).strip()
    png = write_png(
        tmp_path / "long.png", text("parameters", f"{prompt}\nNegative prompt: blur\nSteps: 3, Seed: 4")
    )
    panel.read_picture(png)
    assert panel.prompt.toPlainText() == prompt[:PROMPT_CHARS]
    assert panel.negative.toPlainText() == "blur" and panel.steps.value() == 3
    assert (
        f"Prompt cut ({len(prompt):,} characters; the first {PROMPT_CHARS:,} were kept)"
        in panel.status.text()
    )
