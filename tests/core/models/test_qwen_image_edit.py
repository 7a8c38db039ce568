"""Qwen-Image-Edit on the Qwen-Image network: 2511's reference pictures modulated as at timestep 0
(ComfyUI's ``index_timestep_zero``) against diffusers' transformer with ``zero_cond_t``; the Edit
files told apart as ComfyUI does (Comfy-Org's ``__index_timestep_zero__`` marker for 2511, the
file name for 2509, which has Qwen-Image's keys) and loaded with the family's network."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from core.archs.catalog import NETS
from core.archs.conditioning import Conditioning
from core.files.writer import write_safetensors
from core.loading.loader import inspect_for_loading, load_diffusion_model
from core.models.patches import NO_PATCHES
from core.models.qwen_image import QwenImageDiT
from tests.core.generate.reference_qwen_image import ours_from, pack, qwen_image_reference, unpack

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair() -> tuple[Any, QwenImageDiT]:
    hf = qwen_image_reference(dim=256, heads=2, layers=2, seed=21)
    return hf, ours_from(hf)


def _zero_cond(hf: Any, on: bool) -> None:
    hf.zero_cond_t = on
    for block in hf.transformer_blocks:
        block.zero_cond_t = on


def test_2511_references_take_the_zero_timestep_as_diffusers_zero_cond_t(
    pair: tuple[Any, QwenImageDiT],
) -> None:
    hf, base = pair
    ours = QwenImageDiT(dataclasses.replace(base.config, zero_timestep_references=True), device="meta")
    ours.load_state_dict(base.state_dict(), assign=True, strict=True)
    gen = torch.Generator().manual_seed(22)
    x, ctx = torch.randn(1, 16, 8, 4, generator=gen), torch.randn(1, 9, 3584, generator=gen)
    refs = [torch.randn(1, 16, 4, 4, generator=gen), torch.randn(1, 16, 4, 8, generator=gen)]
    sigma = torch.tensor([0.7])
    tokens = torch.cat([pack(x), *(pack(r) for r in refs)], dim=1)
    shapes = [[(1, 4, 2), (1, 2, 2), (1, 2, 4)]]
    mask = torch.ones(ctx.shape[:2], dtype=torch.long)
    try:
        _zero_cond(hf, True)
        with torch.no_grad():
            want = unpack(hf(tokens, ctx, mask, sigma, img_shapes=shapes, return_dict=False)[0][:, :8], 8, 4)
    finally:
        _zero_cond(hf, False)
    with torch.no_grad():
        got = NETS["qwen_image"].forward(
            ours, x, sigma, Conditioning(ctx, references=tuple(refs)), NO_PATCHES
        )
        index = base(x, sigma, ctx, references=refs)
        alone = ours(x, sigma, ctx)
    err = float((got - want).abs().max() / want.abs().max())
    assert err < 1e-5, err
    assert not torch.allclose(got, index, atol=1e-3)  # the zero timestep changes what 2509's method gives
    assert torch.equal(alone, base(x, sigma, ctx))  # without references nothing changes
    assert NETS["qwen_image"].calling.references


def _file(folder: Path, name: str, state: dict[str, torch.Tensor], marker: bool) -> Path:
    stored = {f"model.diffusion_model.{k}": v.to(torch.bfloat16) for k, v in state.items()}
    if marker:  # Comfy-Org's 2511 repacks: an empty tensor that says "index_timestep_zero"
        stored["model.diffusion_model.__index_timestep_zero__"] = torch.tensor([])
    return write_safetensors(folder / name, stored)


@pytest.mark.parametrize(
    "name, marker, family",
    [
        ("qwen_image_edit_2511_bf16.safetensors", True, "qwen-image-edit-2511"),
        ("renamed.safetensors", True, "qwen-image-edit-2511"),
        ("qwen-image-edit-2511-Q8.safetensors", False, "qwen-image-edit-2511"),  # a GGUF-like name
        ("qwen_image_edit_2509_fp8_e4m3fn.safetensors", False, "qwen-image-edit"),
        ("Qwen-Image-Edit-2509-Q4_K_M.safetensors", False, "qwen-image-edit"),
        ("qwen_image_edit_fp8_e4m3fn.safetensors", False, "qwen-image-edit-2508"),  # the original's
        ("qwen_image_bf16.safetensors", False, "qwen-image"),
    ],
)
def test_edit_files_are_told_apart_and_load_with_their_network(
    tmp_path: Path, pair: tuple[Any, QwenImageDiT], name: str, marker: bool, family: str
) -> None:
    _, ours = pair
    path = _file(tmp_path, name, ours.state_dict(), marker)
    _, det = inspect_for_loading(path)
    assert (det.kind, det.family) == ("diffusion_model", family)
    loaded = load_diffusion_model(path)
    assert loaded.family == family and isinstance(loaded.module, QwenImageDiT)
    assert loaded.module.config.zero_timestep_references == (family == "qwen-image-edit-2511")
