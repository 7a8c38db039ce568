"""ControlNet numerics against diffusers' ControlNetModel + UNet2DConditionModel (tiny, random weights).

diffusers adds ``conditioning_scale`` x the ControlNet's down-block and mid-block residuals to the
UNet's skip connections and middle block; ComfyUI's ControlNetApplyAdvanced (strength) does the same
with the original layout's zero convolutions, which is what ours computes. Both release layouts of
the same ControlNet load to the same network, bit for bit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.errors import LoadoutError
from core.generate.controlnet import AppliedControlNet, ControlStack, center_resize
from core.loading.controlnet import load_controlnet
from core.models.controlnet import ControlResiduals
from core.sampling.conditioning import Conditioning
from tests.core.generate.controlnet_pair import controlnet_files, diffusers_pair, our_unet
from tests.fixtures.st_files import write_tensors

diffusers = pytest.importorskip("diffusers")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Path, Path]:
    cn, unet = diffusers_pair(seed=3)
    d, o = controlnet_files(cn, tmp_path_factory.mktemp("cn"))
    return cn, unet, d, o


def _inputs(batch: int = 2) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(batch, 4, 8, 8, generator=g)
    t = torch.tensor([999.0, 500.0][:batch])
    ctx = torch.randn(batch, 77, 768, generator=g)
    hint = torch.rand(1, 3, 64, 64, generator=g)
    return x, t, ctx, hint


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("which", ["diffusers", "original"])
@pytest.mark.parametrize("strength", [1.0, 0.55])
def test_controlled_unet_equals_diffusers(
    pair: tuple[Any, Any, Path, Path], which: str, strength: float
) -> None:
    hf_cn, hf_unet, d_file, o_file = pair
    loaded = load_controlnet(d_file if which == "diffusers" else o_file)
    assert loaded.family == "sd1" and loaded.layout == which
    x, t, ctx, hint = _inputs()
    with torch.no_grad():
        down, mid = hf_cn(
            x,
            t,
            ctx,
            controlnet_cond=hint.expand(2, -1, -1, -1),
            conditioning_scale=strength,
            return_dict=False,
        )
        want = hf_unet(
            x, t, ctx, down_block_additional_residuals=down, mid_block_additional_residual=mid
        ).sample
        stack = ControlStack([AppliedControlNet(loaded.module, hint, strength, (1e9, 0.0))])
        residuals = stack.residuals(x, t, Conditioning(ctx))
        assert residuals is not None
        got = our_unet(hf_unet)(x, t, ctx, patches=residuals.patches())
        plain = our_unet(hf_unet)(x, t, ctx)
    assert _rel(got, want) < 1e-5
    assert _rel(got, plain) > 1e-3  # the control changed the output


def test_both_layouts_load_the_same_bits(pair: tuple[Any, Any, Path, Path]) -> None:
    _, _, d_file, o_file = pair
    a, b = load_controlnet(d_file).module.state_dict(), load_controlnet(o_file).module.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_two_controlnets_add_in_order_and_a_range_leaves_one_out(pair: tuple[Any, Any, Path, Path]) -> None:
    _, _, d_file, o_file = pair
    m1, m2 = load_controlnet(d_file).module, load_controlnet(o_file).module
    x, t, ctx, hint = _inputs(1)
    cond = Conditioning(ctx)
    one = AppliedControlNet(m1, hint, 0.7, (1e9, 0.0))
    two = AppliedControlNet(m2, hint.flip(-1), 1.3, (5.0, 1.0))  # acts only for sigmas in [1, 5]
    stack = ControlStack([one, two])
    with torch.no_grad():
        both = stack.residuals(x, t, cond, torch.tensor([3.0]))
        first_only = stack.residuals(x, t, cond, torch.tensor([10.0]))
        a = ControlStack([one]).residuals(x, t, cond)
        b = ControlStack([two]).residuals(x, t, cond)
    assert isinstance(both, ControlResiduals) and a is not None and b is not None
    assert first_only is not None and torch.equal(first_only.middle, a.middle)  # type: ignore[arg-type]
    for s, sa, sb in zip(both.skips, a.skips, b.skips, strict=True):
        assert torch.equal(s, sa + sb)  # type: ignore[operator]


def test_hint_is_center_cropped_then_nearest_exact() -> None:
    img = torch.arange(2 * 6, dtype=torch.float32).reshape(1, 1, 2, 6)  # aspect 3: crop to 2x2 in the middle
    out = center_resize(img, 4, 4)
    want = torch.nn.functional.interpolate(img[..., 2:4], size=(4, 4), mode="nearest-exact")
    assert torch.equal(out, want)
    tall = torch.arange(6 * 2, dtype=torch.float32).reshape(1, 1, 6, 2)
    assert torch.equal(center_resize(tall, 2, 2), tall[..., 2:4, :])


def test_a_damaged_or_wrong_file_is_refused_with_a_clear_error(
    pair: tuple[Any, Any, Path, Path], tmp_path: Path
) -> None:
    _, _, _, o_file = pair
    from safetensors.torch import load_file

    state = load_file(str(o_file))
    del state["control_model.zero_convs.1.0.weight"]
    bad = write_tensors(tmp_path / "cut.safetensors", state)
    with pytest.raises(LoadoutError) as err:
        load_controlnet(bad)
    assert err.value.code in ("layout_mismatch", "wrong_kind")
    unet_only = write_tensors(tmp_path / "unet.safetensors", {"x.weight": torch.zeros(2)})
    with pytest.raises(LoadoutError):
        load_controlnet(unet_only)


def test_sdxl_controlnet_with_its_size_vector_equals_diffusers() -> None:
    """An SDXL ControlNet embeds the same ``y`` (pooled CLIP-G ++ size embeddings) as its UNet."""
    from core.loading.controlnet import controlnet_diffusers_to_original
    from core.loading.convert.unet_diffusers import unet_diffusers_to_original
    from core.models.controlnet import ControlNetConfig, ControlNetModel
    from core.models.unet import UNetConfig, UNetModel
    from core.text.conditioning import SDXL_EMBED_DIM, sdxl_adm
    from tests.core.generate.reference import randomize

    context, pooled_dim = 80, 40
    adm = pooled_dim + 6 * SDXL_EMBED_DIM
    blocks: dict[str, Any] = {
        "block_out_channels": (32, 64), "layers_per_block": 1,
        "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D"), "cross_attention_dim": context,
        "attention_head_dim": (2, 4), "transformer_layers_per_block": (1, 2), "use_linear_projection": True,
        "addition_embed_type": "text_time", "addition_time_embed_dim": SDXL_EMBED_DIM,
        "projection_class_embeddings_input_dim": adm,
    }  # fmt: skip
    torch.manual_seed(0)
    hf_unet = randomize(
        diffusers.UNet2DConditionModel(
            sample_size=8, up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), **blocks
        ),
        21,
    )
    hf_cn = randomize(diffusers.ControlNetModel(**blocks), 22)
    cfg = UNetConfig.per_level(
        model_channels=32, channel_mult=(1, 2), num_res_blocks=1, level_depth=(0, 2),
        transformer_depth_middle=2, context_dim=context, num_head_channels=16,
        use_linear_in_transformer=True, adm_in_channels=adm,
    )  # fmt: skip
    unet = UNetModel(cfg).eval()
    unet.load_state_dict(unet_diffusers_to_original(hf_unet.state_dict(), cfg), strict=True)
    cn = ControlNetModel(ControlNetConfig(cfg)).eval()
    cn.load_state_dict(controlnet_diffusers_to_original(hf_cn.state_dict(), cn.config), strict=True)
    g = torch.Generator().manual_seed(3)
    x, ctx = torch.randn(2, 4, 8, 8, generator=g), torch.randn(2, 77, context, generator=g)
    pooled, hint = torch.randn(2, pooled_dim, generator=g), torch.rand(1, 3, 64, 64, generator=g)
    t = torch.tensor([700.0, 20.0])
    added = {"text_embeds": pooled, "time_ids": torch.tensor([[64.0, 64, 0, 0, 64, 64]] * 2)}
    with torch.no_grad():
        down, mid = hf_cn(
            x, t, ctx, controlnet_cond=hint.expand(2, -1, -1, -1), conditioning_scale=0.8,
            added_cond_kwargs=added, return_dict=False,
        )  # fmt: skip
        want = hf_unet(
            x, t, ctx, added_cond_kwargs=added, down_block_additional_residuals=down,
            mid_block_additional_residual=mid,
        ).sample  # fmt: skip
        y = sdxl_adm(pooled, width=64, height=64)
        stack = ControlStack([AppliedControlNet(cn, hint, 0.8, (1e9, 0.0))])
        residuals = stack.residuals(x, t, Conditioning(ctx, y))
        assert residuals is not None
        got = unet(x, t, ctx, y, patches=residuals.patches())
    assert _rel(got, want) < 1e-5


def test_the_room_asked_for_the_residuals_is_what_they_take(pair: tuple[Any, Any, Path, Path]) -> None:
    from core.generate.controlnet import residual_bytes

    _, _, d_file, _ = pair
    module = load_controlnet(d_file).module
    x = torch.randn(3, 4, 9, 7)  # odd sizes: each level rounds up, as the strided convolutions do
    with torch.no_grad():
        r = ControlStack([AppliedControlNet(module, torch.rand(1, 3, 72, 56), 1.0, (1e9, 0.0))]).residuals(
            x, torch.tensor([10.0] * 3), Conditioning(torch.randn(3, 77, 768))
        )
    assert r is not None
    taken = sum(t.numel() * t.element_size() for t in (*r.skips, r.middle) if t is not None)
    assert residual_bytes(module, 3, 9, 7, 4) == taken
