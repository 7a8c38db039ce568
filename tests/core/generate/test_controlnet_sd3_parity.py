"""The SD3 joint-block ControlNet (diffusers' ``SD3ControlNetModel``, InstantX's layout) against
diffusers at SD3 Medium's width (1536: 24 heads of 64; one ControlNet block, two base blocks) and,
for two ControlNet blocks, at 256; random weights, fp32.

ComfyUI and diffusers map a ControlNet's few blocks onto the base network's many differently:
ComfyUI repeats block ``i``'s output ``depth // blocks`` times (``depth`` = width / 64 = 24, once
less for the last block) and adds the list's item ``i`` after base block ``i``; diffusers adds item
``int(i / (base_blocks / len(list)))`` and never after the last, text-pre-only block. With the real
24-block base both give the same; with two base blocks the reference here gets ComfyUI's list item
by item (and, through a forward hook, its residual after the last block) - set up as ComfyUI
computes, as the project's parity tests are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.archs.control import ControlInput
from core.archs.mmdit.control_output import JointResiduals
from core.archs.mmdit.controlnet import JointControlNet, joint_counts
from core.archs.mmdit.keys import sd3_diffusers_to_original
from core.errors import LoadoutError
from core.loading.controlnet import load_controlnet
from core.models.mmdit import MMDiT, MMDiTConfig
from core.sampling.conditioning import Conditioning
from tests.core.generate.reference import randomize
from tests.core.generate.sd3_controlnet_pair import diffusers_file, joint_controlnet, no_init
from tests.fixtures.st_files import write_tensors

diffusers = pytest.importorskip("diffusers")
pytestmark = pytest.mark.usefixtures("one_thread")

HEADS, CONTEXT, POOLED = 24, 64, 32


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    cn = joint_controlnet(HEADS, 1, context=CONTEXT, pooled=POOLED, seed=31)
    return cn, diffusers_file(cn, tmp_path_factory.mktemp("cn") / "sd3_canny_instantx.safetensors")


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    cn = joint_controlnet(4, 2, context=CONTEXT, pooled=POOLED, seed=33)
    return cn, diffusers_file(cn, tmp_path_factory.mktemp("cn") / "narrow.safetensors")


def _inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 16, 8, 12, generator=g)
    t = torch.tensor([870.0, 240.0])
    ctx, pooled = torch.randn(2, 10, CONTEXT, generator=g), torch.randn(2, POOLED, generator=g)
    return x, t, ctx, pooled, torch.randn(1, 16, 8, 12, generator=g)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def _ours(module: Any, x: torch.Tensor, t: torch.Tensor, ctx: Any, pooled: Any, hint: Any) -> JointResiduals:
    with torch.no_grad():
        out = module.control(ControlInput(x, t, Conditioning(ctx, pooled), t / 1000, hint))
    assert isinstance(out, JointResiduals)
    return out


def _diffusers(hf: Any, x: torch.Tensor, t: Any, ctx: Any, pooled: Any, hint: Any) -> list[torch.Tensor]:
    with torch.no_grad():  # the pipeline's InstantX setting: zero pooled vectors
        return list(
            hf(x, hint.expand(2, -1, -1, -1), 1.0, ctx, torch.zeros_like(pooled), t, return_dict=False)[0]
        )


def test_outputs_equal_diffusers_at_sd3_width(net: tuple[Any, Path]) -> None:
    hf, path = net
    loaded = load_controlnet(path)
    assert (loaded.family, loaded.layout) == ("sd3", "diffusers")
    assert isinstance(loaded.module, JointControlNet)
    x, t, ctx, pooled, hint = _inputs()
    want = _diffusers(hf, x, t, ctx, pooled, hint)
    got = _ours(loaded.module, x, t, ctx, pooled, hint)  # our net zeroes the pooled vectors itself
    assert len(got.outputs) == 23 and all(o is got.outputs[0] for o in got.outputs)  # 24 // 1 - 1
    assert _rel(got.outputs[0], want[0]) < 1e-4  # type: ignore[arg-type]


def test_two_blocks_repeat_as_comfyui(narrow: tuple[Any, Path]) -> None:
    hf, path = narrow
    x, t, ctx, pooled, hint = _inputs()
    want = _diffusers(hf, x, t, ctx, pooled, hint)
    got = _ours(load_controlnet(path).module, x, t, ctx, pooled, hint)
    assert joint_counts(256, 2) == [2, 1] and joint_counts(1536, 2) == [12, 11]
    a, b, c = got.outputs
    assert a is b and c is not a
    assert _rel(a, want[0]) < 1e-4 and _rel(c, want[1]) < 1e-4  # type: ignore[arg-type]


def test_base_network_with_the_outputs_equals_diffusers(net: tuple[Any, Path]) -> None:
    path = net[1]
    config = MMDiTConfig(
        depth=2, pos_embed_max_size=16, context_dim=CONTEXT, adm_in_channels=POOLED, num_heads=HEADS
    )
    with no_init():
        hf = diffusers.SD3Transformer2DModel(
        sample_size=16, patch_size=2, in_channels=16, out_channels=16, num_layers=2, attention_head_dim=64,
        num_attention_heads=HEADS, joint_attention_dim=CONTEXT, caption_projection_dim=1536,
        pooled_projection_dim=POOLED, pos_embed_max_size=16,
    )  # fmt: skip
    randomize(hf, 32)
    base = MMDiT(config).eval()
    base.load_state_dict(sd3_diffusers_to_original(hf.state_dict(), config), strict=True)
    x, t, ctx, pooled, hint = _inputs()
    residuals = _ours(load_controlnet(path).module, x, t, ctx, pooled, hint).scaled(0.7)
    listed = [r for r in residuals.outputs[:2] if r is not None]
    last = hf.transformer_blocks[-1].register_forward_hook(lambda m, a, out: (out[0], out[1] + listed[1]))
    try:
        with torch.no_grad():
            want = hf(x, ctx, pooled, t, block_controlnet_hidden_states=listed, return_dict=False)[0]
            got = base(x, t, ctx, pooled, patches=residuals.patches())
            plain = base(x, t, ctx, pooled)
    finally:
        last.remove()
    assert _rel(got, want) < 1e-4
    assert _rel(got, plain) > 1e-2  # the control changed the output


def test_two_nets_add_in_order_and_longer_lists_keep_their_tail() -> None:
    a, b, c = (torch.full((1, 2, 3), v) for v in (1.0, 2.0, 4.0))
    first = JointResiduals((a, a, b)).scaled(2.0)
    assert first.outputs[0] is first.outputs[1]  # a shared tensor is scaled once and stays shared
    total = first.merged(JointResiduals((c,)))
    assert [float(o.max()) for o in total.outputs if o is not None] == [6.0, 2.0, 4.0]


def test_a_cut_or_foreign_file_is_refused_in_words(narrow: tuple[Any, Path], tmp_path: Path) -> None:
    from safetensors.torch import load_file

    state = load_file(str(narrow[1]))
    del state["transformer_blocks.1.attn.to_k.weight"]
    with pytest.raises(LoadoutError) as err:
        load_controlnet(write_tensors(tmp_path / "cut.safetensors", state))
    assert err.value.code == "layout_mismatch" and "to_k" in str(err.value)
    del state["pos_embed.pos_embed"]
    state["transformer_blocks.1.attn.to_k.weight"] = torch.zeros(256, 256)
    with pytest.raises(LoadoutError) as err:
        load_controlnet(write_tensors(tmp_path / "no_table.safetensors", state))
    assert err.value.code == "layout_mismatch" and "position table" in str(err.value)


def test_an_sd3_controlnet_on_flux_is_refused_in_words(narrow: tuple[Any, Path]) -> None:
    from core.generate.controlnet import check_fits

    net = load_controlnet(narrow[1])
    with pytest.raises(LoadoutError) as err:
        check_fits(net, "flux-dev")
    assert err.value.code == "wrong_controlnet"
    assert "ControlNet for sd3" in str(err.value) and "flux-dev" in str(err.value)
    check_fits(net, "sd3.5-medium")  # as wide and as deep: it fits
