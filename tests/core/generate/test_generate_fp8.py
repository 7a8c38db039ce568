"""``loadout generate --dtype fp8_e4m3fn`` on a stand-in fp8 card: the diffusion model multiplies
through ``torch._scaled_mm`` (a reference here, counting calls), the latent and the conditioning
stay 16-bit, the reason is among the notes, and the picture stays close to the plain one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.demo import DemoLibrary
from core.generate.command import generate_files
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from tests.core.ops.test_fp8_opt_in import ScaledMM, card
from tests.fixtures.demo_copy import DemoAt

__all__ = ["card"]  # the stand-in card fixture


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def test_generate_with_fp8_matmul_multiplies_in_fp8_and_keeps_16_bit_latents(
    demo: DemoLibrary, tmp_path: Path, card: tuple[ScaledMM, list[object]]
) -> None:
    mm, _ = card
    settings = ImageSettings("a fox", "blurry", Sampling(seed=5, steps=3), 64, 64)
    models = ModelFiles(checkpoint=demo.checkpoint)
    fp8 = generate_files(
        GenerateRequest(models, settings, output=tmp_path / "fp8.png", dtype=torch.float8_e4m3fn)
    )
    assert mm.out_dtypes and set(mm.out_dtypes) <= {torch.float16, torch.bfloat16}
    assert any("fp8 matmul" in n and "activations run in" in n for n in fp8.notes), fp8.notes
    calls = len(mm.out_dtypes)
    mm.out_dtypes.clear()
    plain = generate_files(GenerateRequest(models, settings, output=tmp_path / "plain.png"))
    assert mm.out_dtypes == [] and calls > 0
    assert not any("fp8" in n for n in plain.notes)
    a = np.asarray(Image.open(fp8.images[0].path), dtype=np.float32)
    b = np.asarray(Image.open(plain.images[0].path), dtype=np.float32)
    assert a.shape == b.shape == (64, 64, 3) and np.abs(a - b).mean() < 12.0  # slightly different
