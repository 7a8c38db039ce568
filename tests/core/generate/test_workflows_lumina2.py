"""img2img, inpainting, the hires fix (latent and model), the queue and an X/Y grid on
Lumina 2 (Next-DiT, Gemma-2, Flux VAE): see new_family_workflows.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.generate.new_family_workflows import (
    check_grid,
    check_workflows,
    run_workflows,
    vae_round_trip,
)
from tests.core.generate.test_generate_lumina2_cli import _files

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return _files(tmp_path_factory.mktemp("lumina2"))


def test_img2img_inpainting_and_hires_through_the_queue(
    files: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    made = run_workflows(files, tmp_path)
    check_workflows(made, vae_round_trip(files[2], "lumina2", tmp_path / "init.png"))


def test_a_grid_from_the_command_line(
    files: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check_grid(files, tmp_path, capsys)
