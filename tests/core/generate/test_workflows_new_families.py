"""img2img, inpainting, the hires fix (latent and model), the queue and an X/Y grid on the DiT
families added after FLUX.1, one set of files each (see new_family_workflows.py): FLUX.2 klein
(latent 1/16 of the picture, 128 packed channels), Lumina 2 (Next-DiT, Gemma-2, Flux VAE),
Qwen-Image (Wan 2.1 VAE latents with a time axis, 2x2 tokens packed inside the network) and
Z-Image Turbo (Next-DiT, Flux VAE)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.core.generate import test_generate_flux2_cli as flux2
from tests.core.generate import test_generate_lumina2_cli as lumina2
from tests.core.generate import test_generate_qwen_image_cli as qwen_image
from tests.core.generate import test_generate_zimage_cli as zimage
from tests.core.generate.new_family_workflows import (
    check_grid,
    check_workflows,
    run_workflows,
    vae_round_trip,
)

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

Files = tuple[Path, Path, Path]
#: the family's VAE as ``vae_round_trip`` names it, and the maker of its files
FAMILIES: dict[str, Callable[[Path], Files]] = {
    "flux2-klein-4b": flux2._files,
    "lumina2": lumina2._files,
    "qwen-image": qwen_image._files,
    "z-image": zimage._files,
}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family_files(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Files]:
    family: str = request.param
    return family, FAMILIES[family](tmp_path_factory.mktemp(family))


def test_img2img_inpainting_and_hires_through_the_queue(
    family_files: tuple[str, Files], tmp_path: Path
) -> None:
    family, files = family_files
    made = run_workflows(files, tmp_path)
    check_workflows(made, vae_round_trip(files[2], family, tmp_path / "init.png"))


def test_a_grid_from_the_command_line(
    family_files: tuple[str, Files], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check_grid(family_files[1], tmp_path, capsys)
