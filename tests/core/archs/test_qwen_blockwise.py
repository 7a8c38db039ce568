"""DiffSynth's blockwise Qwen-Image ControlNets (core/archs/qwen_image/blockwise.py) at the released
width (3072; two control blocks, random weights, fp32) against ComfyUI's computation written out
here (its ``QwenImageBlockWiseControlNet`` and ``DiffSynthCnetPatch``: no diffusers class exists, and
DiffSynth-Studio is no light install): the hint's projection and each block's residual on the
picture's tokens, to 1e-4 relative; and ComfyUI's order when InstantX's residuals are stacked with
it (every model patch after a block, then the ControlNets' residual)."""

from __future__ import annotations

import pytest
import torch

from core.archs.conditioning import Conditioning
from core.archs.control import ControlInput, MakesMaskedHint, MaskedHint
from core.archs.qwen_image.blockwise import QwenBlockwiseControlNet, blockwise_config
from core.archs.qwen_image.controlnet import QwenControlResiduals
from core.errors import ModelMismatchError
from core.models.patches import PatchPoints, Site
from tests.core.generate.reference_qwen_image import blockwise_net, comfy_hint, comfy_residual

pytestmark = pytest.mark.usefixtures("one_thread")

DIM, H, W = 3072, 6, 4  # latent cells: 6 tokens of 2x2


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.fixture(scope="module")
def net() -> QwenBlockwiseControlNet:
    return blockwise_net(DIM, 2, 1, seed=5)


def test_residuals_equal_comfyui_at_the_released_width(net: QwenBlockwiseControlNet) -> None:
    gen = torch.Generator().manual_seed(1)
    sd = net.state_dict()
    x = torch.randn(2, 16, H, W, generator=gen)
    hint = torch.cat([torch.randn(1, 16, H, W, generator=gen), torch.rand(1, 1, H, W, generator=gen)], 1)
    ctx = Conditioning(torch.zeros(2, 3, 3584))
    with torch.no_grad():
        out = net.control(ControlInput(x, torch.ones(2), ctx, torch.ones(2), hint)).scaled(0.6)
        want_hint = comfy_hint(sd, hint)
        assert _rel(out.hint, want_hint) < 1e-5
        patches = out.patches()
        refs = 3  # an Edit model's reference tokens after the picture's: left alone
        img = torch.randn(2, 6 + refs, DIM, generator=gen)
        for i in range(2):
            want = img.clone()
            residual = comfy_residual(sd, i, img[:, :6], want_hint)
            want[:, :6] += residual * 0.6
            got = patches.block(img.clone(), Site("double", i))
            assert _rel(got[:, :6] - img[:, :6], residual * 0.6) < 1e-4
            assert torch.equal(got[:, 6:], img[:, 6:]) and _rel(got, want) < 1e-5
            assert float(residual.abs().max()) > 0.1
            img = got
        assert torch.equal(patches.block(img.clone(), Site("double", 2)), img)  # past its blocks


def test_stacked_with_instantx_the_model_patch_runs_first(net: QwenBlockwiseControlNet) -> None:
    """ComfyUI runs a block's ``double_block`` patches, then adds ``control["input"]``: the
    blockwise net reads the tokens before InstantX's residual, in either stacking order."""
    gen = torch.Generator().manual_seed(2)
    sd = net.state_dict()
    x = torch.randn(1, 16, H, W, generator=gen)
    hint = torch.cat([torch.randn(1, 16, H, W, generator=gen), torch.ones(1, 1, H, W)], 1)
    inp = ControlInput(x, torch.ones(1), Conditioning(torch.zeros(1, 3, 3584)), torch.ones(1), hint)
    r = torch.randn(1, 6, DIM, generator=gen)
    instantx = QwenControlResiduals((((r,), 60),))
    img = torch.randn(1, 6, DIM, generator=gen)
    with torch.no_grad():
        blockwise = net.control(inp)
        want = img + comfy_residual(sd, 0, img, comfy_hint(sd, hint)) + r
        for stacked in (instantx.merged(blockwise), blockwise.merged(instantx)):
            assert _rel(stacked.patches().block(img.clone(), Site("double", 0)), want) < 1e-5
    with pytest.raises(ModelMismatchError, match="another network"):
        blockwise.merged(object())


def test_mask_channel_and_refusals(net: QwenBlockwiseControlNet) -> None:
    assert isinstance(net, MaskedHint) and isinstance(net, MakesMaskedHint) and net.mask_hint
    keep = torch.zeros(1, 1, 64, 32)
    keep[..., :32, :] = 1.0

    def encode(pixels: torch.Tensor) -> torch.Tensor:
        return torch.zeros(1, 16, pixels.shape[-2] // 8, pixels.shape[-1] // 8)

    made = net.masked_latent_hint(torch.zeros(1, 3, 64, 32), keep, encode)
    assert made.shape == (1, 17, 8, 4) and torch.equal(made[0, 16, :, 0], torch.tensor([1.0] * 4 + [0.0] * 4))
    assert net.masked_latent_hint(torch.zeros(1, 3, 64, 32), None, encode)[0, 16].eq(1).all()
    x = torch.zeros(1, 16, H, W)
    bad = ControlInput(x, torch.ones(1), Conditioning(torch.zeros(1, 3, 3584)), torch.ones(1), x)
    with pytest.raises(ModelMismatchError, match="17 channels"):
        net.control(bad)
    with pytest.raises(ModelMismatchError, match="2 control blocks for a network of 60"):
        net.require_points(PatchPoints({"double": 60}))
    net.require_points(PatchPoints({"double": 2}))


def test_config_from_a_file_s_shapes(net: QwenBlockwiseControlNet) -> None:
    shapes = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    assert blockwise_config(shapes) == (DIM, 2, 1)
    shapes["img_in.weight"] = (DIM, 66)
    with pytest.raises(ValueError, match="66 numbers"):
        blockwise_config(shapes)
