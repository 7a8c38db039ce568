"""Every network gives the same output fully resident and with any fraction of its layers streamed,
with and without a LoRA stack (patches baked vs applied at cast time)."""

from __future__ import annotations

import random

import pytest
import torch

from core.ops.streaming import patch_fn_from, stream_layers, unstream_layers
from core.patching.patcher import ModelPatcher
from tests.core.ops import lora_patches, op_layers
from tests.fixtures.tiny_models import (
    TINY_CHROMA,
    TINY_CLIP_G,
    TINY_CLIP_L,
    TINY_FLUX,
    TINY_MMDIT,
    TINY_PIXART,
    TINY_T5,
    TINY_UNET_SD1,
    TINY_UNET_SDXL,
    TINY_VAE_4,
    TINY_VAE_16,
    Tiny,
)

NETWORKS = [
    TINY_UNET_SD1, TINY_UNET_SDXL, TINY_MMDIT, TINY_FLUX, TINY_CHROMA, TINY_PIXART, TINY_VAE_4,
    TINY_VAE_16, TINY_CLIP_L, TINY_CLIP_G, TINY_T5,
]  # fmt: skip


def _bits(outputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    return [o.detach().contiguous().reshape(-1).view(torch.uint8) for o in outputs]


@pytest.mark.parametrize("tiny", NETWORKS, ids=lambda t: t.name)
@pytest.mark.parametrize("fraction", [0.3, 1.0])
def test_streamed_equals_resident(tiny: Tiny, fraction: float) -> None:
    model = tiny.reference()
    resident = tiny.forward(model)
    names = op_layers(model)
    chosen = random.Random(len(names)).sample(names, max(1, int(len(names) * fraction)))
    streamed = stream_layers(model, chosen, "cpu")
    try:
        out = tiny.forward(model)
        assert streamed.stats.bytes_total > 0
    finally:
        unstream_layers(model, chosen)
    assert all(torch.equal(a, b) for a, b in zip(_bits(out), _bits(resident), strict=True))


@pytest.mark.parametrize("tiny", NETWORKS, ids=lambda t: t.name)
def test_streamed_with_loras_equals_baked(tiny: Tiny) -> None:
    baked_model = tiny.reference()
    names = op_layers(baked_model)
    targets = names[:: max(1, len(names) // 6)]
    baker = ModelPatcher(baked_model)
    baker.add_patches("style", lora_patches(baked_model, targets, seed=4), -0.7)
    baker.apply()
    baked = tiny.forward(baked_model)

    model = tiny.reference()
    patcher = ModelPatcher(model)
    patcher.add_patches("style", lora_patches(model, targets, seed=4), -0.7)
    half = names[: len(names) // 2]
    patcher.apply(keys=[k for k in patcher.patched_keys() if k.rsplit(".", 1)[0] not in half])
    stream_layers(model, half, "cpu", patch_fn=patch_fn_from(patcher.patched_weight))
    try:
        streamed = tiny.forward(model)
    finally:
        unstream_layers(model, half)
    assert all(torch.equal(a, b) for a, b in zip(_bits(streamed), _bits(baked), strict=True))
