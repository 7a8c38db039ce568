"""Output names are decided before any work (core/files/destination.py): standard streams and
/proc paths, names longer than the file system allows (for the names really written: OUT.png,
OUT-2.png), and `-o newdir/` for a file are refused in words, and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main
from app.demo import DemoLibrary
from tests.fixtures.demo_copy import DemoAt


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _generate(demo: DemoLibrary, out: str, *extra: str) -> list[str]:
    return ["generate", str(demo.checkpoint), "--prompt", "a fox", "--steps", "1", "--size", "64x64",
            "-o", out, *extra]  # fmt: skip


def _said(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err


@pytest.mark.parametrize("out", ["/dev/stdout", "/proc/self/fd/1"])
def test_standard_streams_and_proc_paths_are_refused(
    demo: DemoLibrary, out: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_generate(demo, out)) == 2
    assert "system folder" in _said(capsys)
    assert not Path("/dev/stdout.png").exists()


def test_a_name_too_long_once_png_or_the_batch_number_is_added_is_refused_first(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_generate(demo, str(tmp_path / ("a" * 252)))) == 2  # + ".png": 256 bytes
    said = _said(capsys)
    assert "256 bytes long" in said and "allows 255" in said
    assert main(_generate(demo, str(tmp_path / ("b" * 250 + ".png")), "--batch", "2")) == 2  # b...-2.png
    assert "255" in _said(capsys)
    assert main(_generate(demo, str(tmp_path / ("é" * 200 + ".png")))) == 2  # bytes, not characters
    assert "404 bytes long" in _said(capsys)
    assert list(tmp_path.iterdir()) == []


def test_merge_and_convert_into_a_folder_name_are_refused(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "newdir") + "/"
    assert main(["merge", str(demo.checkpoint), "--lora", str(demo.lora), "-o", out]) == 2
    assert "names a folder" in _said(capsys)
    assert main(["convert", str(demo.checkpoint), "-o", out]) == 2
    assert "names a folder" in _said(capsys)
    assert list(tmp_path.iterdir()) == []


def test_a_grid_into_a_system_folder_is_refused_before_any_work(
    demo: DemoLibrary, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_generate(demo, "/dev/grid", "--x", "seed:1,2")) == 2
    assert "system folder" in _said(capsys) and not Path("/dev/grid").exists()
