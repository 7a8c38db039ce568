"""InstantX's Qwen-Image ControlNets (core/archs/qwen_image/controlnet.py) against diffusers'
``QwenImageControlNetModel`` and ``QwenImageTransformer2DModel(controlnet_block_samples=...)`` at the
released width (3072, 24 heads of 128; one block, shared by the two networks), random weights, fp32;
and ComfyUI's way of spreading a few blocks' residuals over the base network's 60."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from core.archs.conditioning import Conditioning
from core.archs.control import ControlInput, MaskedHint
from core.archs.qwen_image.controlnet import (
    MAIN_BLOCKS,
    QwenControlResiduals,
    QwenImageControlNet,
    controlnet_config,
)
from core.errors import ModelMismatchError
from core.models.patches import Site
from core.models.qwen_image import QwenImageConfig
from tests.core.generate.reference_qwen_image import (
    our_controlnet_from,
    ours_from,
    pack,
    qwen_controlnet_reference,
    qwen_image_reference,
    unpack,
)

diffusers = pytest.importorskip("diffusers")
pytestmark = pytest.mark.usefixtures("one_thread")
slow = pytest.mark.slow

H = W = 8  # latent cells: 16 tokens


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.fixture(scope="module")
def nets() -> tuple[Any, ...]:
    hf = qwen_image_reference(seed=11)
    hf_cn = qwen_controlnet_reference(hf, extra=4, seed=12)
    return hf, hf_cn, ours_from(hf), our_controlnet_from(hf_cn)


@slow
def test_residuals_and_velocity_equal_diffusers(nets: tuple[Any, ...]) -> None:
    hf, hf_cn, ours, cn = nets
    strength = 0.7
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 16, H, W, generator=gen)
    hint = torch.cat(
        [torch.randn(1, 16, H, W, generator=gen), (torch.rand(1, 1, H, W, generator=gen) > 0.5)], 1
    )
    ctx = torch.randn(2, 7, 3584, generator=gen)
    sigma = torch.tensor([0.8, 0.8])
    assert isinstance(cn, MaskedHint) and cn.mask_hint
    with torch.no_grad():
        out = cn.control(ControlInput(x, sigma, Conditioning(ctx), sigma, hint)).scaled(strength)
        mine = ours(x, sigma, ctx, out.patches())
        shapes = [(1, H // 2, W // 2)] * 2
        mask = torch.ones(2, 7, dtype=torch.long)
        samples = hf_cn(
            pack(x), pack(hint.float().expand(2, -1, -1, -1)), strength, ctx, mask, sigma,
            img_shapes=shapes, return_dict=False,
        )  # fmt: skip
        theirs = hf(
            pack(x), ctx, mask, sigma, img_shapes=shapes, controlnet_block_samples=samples, return_dict=False
        )[0]
    (residual,) = out.parts[0][0]
    assert _rel(residual, samples[0]) < 1e-4
    assert _rel(mine, unpack(theirs, H, W)) < 1e-4
    assert float(residual.abs().max()) > 0.1  # a residual that changes the velocity


def _tiny(layers: int, extra: int = 0) -> QwenImageControlNet:
    cfg = QwenImageConfig(dim=128, n_layers=layers, n_heads=1, mlp_hidden=256, context_dim=32)
    net = QwenImageControlNet(cfg, extra)
    with torch.no_grad():
        for p in net.parameters():
            p.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(p.numel()))
    return net.eval()


def test_fewer_blocks_spread_over_sixty_as_comfyui() -> None:
    """ComfyUI repeats each residual ceil(60 / n) times and keeps 60: five blocks cover twelve each;
    a two-block net covers 30 each (diffusers' interval would give block 1 of a 2-block base block
    1's residual: it counts the base's blocks, ComfyUI 60, the same for the released models)."""
    five = tuple(torch.full((1, 4, 2), float(i)) for i in range(5))
    out = QwenControlResiduals(((five, 12),))
    assert [float(out.at(i)[0, 0, 0]) for i in (0, 11, 12, 59)] == [0.0, 0.0, 1.0, 4.0]  # type: ignore[index]
    assert out.at(MAIN_BLOCKS) is None
    assert _tiny(2).repeat == 30 and _tiny(5).repeat == 12 and _tiny(6).repeat == 10
    both = out.merged(QwenControlResiduals(((five[:2], 30),)))
    assert float(both.at(30)[0, 0, 0]) == 2.0 + 1.0  # type: ignore[index]


def test_residual_reaches_the_picture_tokens_only() -> None:
    """An Edit model's reference tokens follow the picture's: they get nothing (ComfyUI adds to the
    first tokens)."""
    r = torch.ones(1, 4, 2)
    patch = QwenControlResiduals((((r,), 60),)).patches()
    h = torch.zeros(1, 6, 2)
    got = patch.block(h, Site("double", 3))
    assert got[:, :4].eq(1).all() and got[:, 4:].eq(0).all()
    assert patch.block(h, Site("single", 3)).eq(0).all()
    with pytest.raises(ModelMismatchError, match="does not fit"):
        patch.block(torch.zeros(1, 3, 2), Site("double", 0))


def test_a_hint_of_the_wrong_channels_is_refused_in_words() -> None:
    net = _tiny(1, extra=1)
    x = torch.zeros(1, 16, 4, 4)
    inp = ControlInput(
        x, torch.ones(1), Conditioning(torch.zeros(1, 3, 32)), torch.ones(1), torch.zeros(1, 16, 4, 4)
    )
    with pytest.raises(ModelMismatchError, match="17 channels"):
        net.control(inp)


def test_config_from_a_file_s_shapes() -> None:
    shapes = {k: tuple(v.shape) for k, v in _tiny(2, extra=1).state_dict().items()}
    config, extra = controlnet_config(shapes)
    assert (config.dim, config.n_layers, config.context_dim, extra) == (128, 2, 32, 1)
    del shapes["controlnet_blocks.1.weight"], shapes["controlnet_blocks.1.bias"]
    with pytest.raises(ValueError, match="controlnet_blocks"):
        controlnet_config(shapes)
