"""FLUX.1 ControlNets at a small width, read from files as artists have them:

* InstantX's union layout (diffusers' ``FluxControlNetModel`` file, 5 double and 10 single blocks as
  the real union net has) against diffusers' ``FluxControlNetModel`` and a 19 + 38-block
  ``FluxTransformer2DModel`` taking its samples (``controlnet_block_samples``,
  ``controlnet_single_block_samples``): with the base's real block counts, ComfyUI's spreading
  (``ceil(19 / 5)`` in a row) and diffusers' ``interval_control`` agree, so the test checks the
  indexing too;
* XLabs' layout (no diffusers class exists): against a direct computation of ComfyUI's
  ``ControlNetFlux`` formulas written out in this test from the module's own weights
  (``hint * 2 - 1``, ``input_hint_block``, 2x2 packing, ``pos_embed_input``, the blocks, and the
  list repeated whole: block ``i`` takes output ``i % n``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from core.archs.conditioning import Conditioning
from core.archs.control import ControlInput, MaskedHint
from core.archs.flux.controlnet import FluxControl, FluxControlConfig, FluxControlNet, spread
from core.archs.flux.net import NET
from core.errors import ModelMismatchError
from core.inspect import inspect_file
from core.loading.controlnet import load_controlnet
from core.loading.convert.dit_diffusers import flux_diffusers_to_original
from core.models.flux import Flux, FluxConfig, make_img_ids, make_txt_ids, pack_latents, unpack_latents
from core.models.flux_blocks import rope
from core.models.patches import NO_PATCHES
from tests.core.generate.reference import randomize

diffusers = pytest.importorskip("diffusers")

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

T5, POOLED, HEADS, HEAD = 24, 32, 2, 16
SMALL: dict[str, Any] = {
    "patch_size": 1, "in_channels": 64, "attention_head_dim": HEAD, "num_attention_heads": HEADS,
    "joint_attention_dim": T5, "pooled_projection_dim": POOLED, "guidance_embeds": True,
    "axes_dims_rope": (8, 4, 4),  # what a 16-wide head gets from rope_axes
}  # fmt: skip
BASE = FluxConfig(
    vec_in_dim=POOLED, context_in_dim=T5, hidden_size=HEADS * HEAD, num_heads=HEADS, depth=19,
    depth_single_blocks=38, axes_dim=(8, 4, 4),
)  # fmt: skip


def _inputs(
    seed: int, batch: int = 2, h: int = 6, w: int = 8
) -> tuple[torch.Tensor, torch.Tensor, Conditioning]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 16, h, w, generator=gen)
    t = torch.tensor([0.7, 0.7][:batch])
    cond = Conditioning(
        torch.randn(batch, 5, T5, generator=gen),
        torch.randn(batch, POOLED, generator=gen),
        torch.tensor([3.5, 3.5][:batch]),
    )
    return x, t, cond


@pytest.fixture(scope="module")
def union(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, FluxControlNet]:
    hf = randomize(diffusers.FluxControlNetModel(num_layers=5, num_single_layers=10, num_mode=7, **SMALL), 3)
    path = tmp_path_factory.mktemp("cn") / "flux-union.safetensors"
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, str(path))
    loaded = load_controlnet(path)
    assert (loaded.family, loaded.layout) == ("flux-dev", "diffusers")
    assert loaded.control_types[:3] == ("canny", "tile", "depth")
    return hf, loaded.module


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-4) -> None:
    assert a.shape == b.shape
    assert float((a - b).abs().max() / b.abs().max()) < tol


def test_union_outputs_and_base_equal_diffusers(union: tuple[Any, FluxControlNet]) -> None:
    hf_cn, ours = union
    x, t, cond = _inputs(1)
    hint = torch.randn(1, 16, 6, 8, generator=torch.Generator().manual_seed(2))
    b, _, h, w = x.shape
    img_ids, txt_ids = make_img_ids(1, h, w)[0], make_txt_ids(1, 5)[0]
    with torch.no_grad():
        got = ours.control(ControlInput(x, t, cond, t, hint, control_type=2))
        want = hf_cn(
            hidden_states=pack_latents(x), controlnet_cond=pack_latents(hint).expand(b, -1, -1),
            controlnet_mode=torch.tensor([[2]] * b), encoder_hidden_states=cond.context,
            pooled_projections=cond.pooled, timestep=t, guidance=cond.guidance, img_ids=img_ids,
            txt_ids=txt_ids, return_dict=False,
        )  # fmt: skip
    assert len(got.double) == 19 and len(got.single) == 38
    for i, sample in enumerate(got.double):
        assert sample is not None
        _close(sample, want[0][i // 4])  # ceil(19 / 5) = 4 base blocks per output, in a row
    for i, sample in enumerate(got.single):
        assert sample is not None
        _close(sample, want[1][i // 4])
    torch.manual_seed(0)
    hf_base = randomize(diffusers.FluxTransformer2DModel(num_layers=19, num_single_layers=38, **SMALL), 4)
    base = Flux(BASE).eval()
    base.load_state_dict(flux_diffusers_to_original(hf_base.state_dict(), BASE), strict=True)
    strength = 0.7
    with torch.no_grad():
        out = NET.forward(base, x, t, cond, got.scaled(strength).patches())
        plain = NET.forward(base, x, t, cond, NO_PATCHES)
        ref = hf_base(
            hidden_states=pack_latents(x), encoder_hidden_states=cond.context, pooled_projections=cond.pooled,
            timestep=t, guidance=cond.guidance, img_ids=img_ids, txt_ids=txt_ids,
            controlnet_block_samples=[s * strength for s in want[0]],
            controlnet_single_block_samples=[s * strength for s in want[1]], return_dict=False,
        )[0]  # fmt: skip
    _close(out, unpack_latents(ref, h, w))
    assert float((out - plain).abs().max()) > 1e-2  # the ControlNet changed the prediction


def test_a_union_net_without_a_type_runs_without_the_mode_token(union: tuple[Any, FluxControlNet]) -> None:
    _, ours = union
    x, t, cond = _inputs(5, batch=1)
    hint = torch.randn(1, 16, 6, 8)
    with torch.no_grad():
        none = ours.control(ControlInput(x, t, cond, t, hint))
        typed = [ours.control(ControlInput(x, t, cond, t, hint, control_type=k)) for k in (0, 2)]
    d0, d1, d2 = none.double[0], typed[0].double[0], typed[1].double[0]
    assert d0 is not None and d1 is not None and d2 is not None
    assert float((d0 - d1).abs().max()) > 1e-3 and float((d1 - d2).abs().max()) > 1e-3
    with pytest.raises(ModelMismatchError, match="7 control types"):
        ours.control(ControlInput(x, t, cond, t, hint, control_type=7))


def _xlabs() -> FluxControlNet:
    cfg = FluxConfig(
        vec_in_dim=POOLED, context_in_dim=T5, hidden_size=HEADS * HEAD, num_heads=HEADS, depth=2,
        depth_single_blocks=0, axes_dim=(8, 4, 4),
    )  # fmt: skip
    net = FluxControlNet(FluxControlConfig(cfg, 64, pixels=True))
    randomize(net, 9)
    return net


def _by_comfyui_formulas(
    net: FluxControlNet, x: torch.Tensor, hint: torch.Tensor, t: torch.Tensor, cond: Conditioning
) -> list[torch.Tensor]:
    """ComfyUI's ``ControlNetFlux.forward`` for XLabs (``latent_input`` False), step by step."""
    from core.models.attention import timestep_embedding

    def emb(v: torch.Tensor) -> torch.Tensor:
        return timestep_embedding(v, 256, time_factor=1000.0)

    b, _, h, w = x.shape
    c = net.input_hint_block(hint * 2.0 - 1.0)  # type: ignore[misc]
    c = c.reshape(1, 16, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(1, -1, 64)
    img = net.img_in(pack_latents(x)) + net.pos_embed_input(c)
    vec = net.time_in(emb(t)) + net.guidance_in(emb(cond.guidance)) + net.vector_in(cond.pooled)  # type: ignore[misc, arg-type]
    txt = net.txt_in(cond.context)
    ids = torch.cat((make_txt_ids(b, txt.shape[1]), make_img_ids(b, h, w)), dim=1)
    pe = rope(ids, (8, 4, 4), 10_000)
    outs = []
    for block, lin in zip(net.double_blocks, net.controlnet_blocks, strict=True):
        img, txt = block(img, txt, pe, block.modulations(vec))
        outs.append(lin(img))
    return [outs[i % len(outs)] for i in range(19)]  # (controlnet_double * repeat)[:19]


def test_xlabs_equals_comfyuis_formulas_by_hand(tmp_path: Path) -> None:
    net = _xlabs()
    path = tmp_path / "flux-canny-controlnet-v3.safetensors"
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))
    loaded = load_controlnet(path)
    assert (loaded.layout, loaded.module.hint_space, loaded.control_types) == ("original", "pixels", ())
    x, t, cond = _inputs(7)
    hint = torch.rand(1, 3, 48, 64, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        got = loaded.module.control(ControlInput(x, t, cond, t, hint))
        want = _by_comfyui_formulas(net, x, hint, t, cond)
    assert got.single == () and len(got.double) == 19
    for a, b in zip(got.double, want, strict=True):
        assert a is not None and torch.equal(a, b)


def test_spreading_and_adding_follow_comfyui() -> None:
    outs = [torch.full((1, 2, 1), float(i)) for i in range(3)]
    assert [float(t[0, 0, 0]) for t in spread(outs, 19, True) if t is not None] == [i // 7 for i in range(19)]
    assert [float(t[0, 0, 0]) for t in spread(outs, 19, False) if t is not None] == [i % 3 for i in range(19)]
    assert math.ceil(19 / 3) == 7
    add = FluxControl((outs[1],), (outs[2],), text_tokens=3)
    merged = add.scaled(2.0).merged(FluxControl((outs[2],), (), 3))
    h = torch.zeros(1, 4, 1)  # two picture tokens and two reference tokens after them
    from core.models.patches import Site

    assert merged.patches().block(h, Site("double", 0))[0, :, 0].tolist() == [4.0, 4.0, 0.0, 0.0]
    joint = torch.zeros(1, 7, 1)  # 3 text tokens, 2 picture tokens, 2 reference tokens
    assert merged.patches().block(joint, Site("single", 0))[0, :, 0].tolist() == [0, 0, 0, 4, 4, 0, 0]
    assert merged.patches().block(joint, Site("single", 1)) is joint
    spread_a, spread_b = spread(outs, 19, True), spread(outs[:2], 19, True)
    both = FluxControl(spread_a, (), 0).merged(FluxControl(spread_b, (), 0))
    assert len({id(t) for t in both.double}) == 4  # a sum per pair of shared outputs, not per block


def test_alimamas_inpainting_net_is_told_apart_and_another_hint_width_refused(tmp_path: Path) -> None:
    hf = diffusers.FluxControlNetModel(num_layers=1, num_single_layers=0, **{**SMALL, "in_channels": 64})
    state = {k: v.contiguous() for k, v in hf.state_dict().items()}
    for channels, name in ((17, "alimama-inpainting"), (18, "eighteen")):
        state["controlnet_x_embedder.weight"] = torch.zeros(HEADS * HEAD, channels * 4)
        save_file(state, str(tmp_path / f"{name}.safetensors"))
    path = tmp_path / "alimama-inpainting.safetensors"
    rec = inspect_file(path).to_json()
    assert (rec["kind"], rec["family"], rec["layout"], rec["variant"]) == (
        "controlnet", "flux-dev", "diffusers", "inpaint"
    )  # fmt: skip
    loaded = load_controlnet(path)
    assert isinstance(loaded.module, MaskedHint) and loaded.module.mask_hint
    assert loaded.module.pos_embed_input.weight.shape == (HEADS * HEAD, 68)
    with pytest.raises(ModelMismatchError) as err:
        load_controlnet(tmp_path / "eighteen.safetensors")
    assert "18 channels per latent cell" in str(err.value.why)
