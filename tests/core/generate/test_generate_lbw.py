"""``loadout generate --lora FILE:S:lbw=...`` on the demo's tiny SD1 checkpoint: block weights that
switch every block off give the picture made without the LoRA, bit for bit (the per-block values
themselves: tests/core/patching/test_block_weights.py), and the PNG's parameters carry the A1111
lora-block-weight tag, read back as written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import main
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from tests.fixtures.demo_copy import DemoAt


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def test_no_block_on_is_no_lora_and_the_tag_is_kept(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    demo_library_at: DemoAt,
) -> None:
    demo = demo_library_at(tmp_path / "demo")
    common = [
        "generate",
        str(demo.checkpoint),
        "--prompt",
        "a fox",
        "--seed",
        "7",
        "--steps",
        "2",
        "--size",
        "64x64",
    ]
    assert main([*common, "-o", str(tmp_path / "plain.png")]) == 0
    assert main([*common, "--lora", f"{demo.lora}:0.8:lbw=NONE", "-o", str(tmp_path / "none.png")]) == 0
    capsys.readouterr()
    assert np.array_equal(_pixels(tmp_path / "none.png"), _pixels(tmp_path / "plain.png"))
    params = parse_parameters(read_png_parameters(tmp_path / "none.png"))
    (lora,) = params.loras
    assert (lora.name, lora.model_strength, lora.block_weights) == (demo.lora.stem, 0.8, "NONE")
