"""`loadout generate`'s hires options become a HiresFix: a latent method by name, an existing file
as an upscale model, anything else refused before a model loads."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from app.commands.hires_args import add_hires_arguments, hires_from_arguments
from core.errors import LoadoutError
from core.generate.hires_settings import HiresFix


def _parse(args: list[str]) -> HiresFix | None:
    p = argparse.ArgumentParser()
    add_hires_arguments(p)
    return hires_from_arguments(p.parse_args(args))


def test_no_scale_no_fix() -> None:
    assert _parse([]) is None


def test_a_method_and_a_model_file(tmp_path: Path) -> None:
    assert _parse(["--hires-scale", "1.5", "--hires-upscaler", "bicubic"]) == HiresFix(
        1.5, 0.5, None, "bicubic"
    )
    model = tmp_path / "4x-UltraSharp.pth"
    model.write_bytes(b"x")
    got = _parse(
        ["--hires-scale", "2", "--hires-denoise", "0.3", "--hires-steps", "7", "--hires-upscaler", str(model)]
    )
    assert got == HiresFix(2.0, 0.3, 7, "nearest-exact", model)
    assert got is not None and got.label == "4x-UltraSharp"


def test_a_name_that_is_neither_method_nor_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LoadoutError, match="neither a latent upscale method nor a file"):
        _parse(["--hires-scale", "2", "--hires-upscaler", str(tmp_path / "nope.pth")])
