"""An InstantX union FLUX.1 ControlNet at the real width (3072, 24 heads of 128, rotary axes 16/56/56),
one double and one single block, random weights, against diffusers' ``FluxControlNetModel``: the
file is diffusers' own state dict (InstantX's layout), read back through detection and the loader
(q, k and v fused into the blocks' ``qkv``); the outputs in union mode (type ``depth``, index 2)
equal diffusers' samples, each spread over ComfyUI's 19 double and 38 single base blocks.

One fp32 copy of the network at a time: diffusers' is dropped before ours is read from the mapped
file. The base network taking the samples is proven against ``FluxTransformer2DModel`` in
tests/core/archs/test_flux_controlnet.py (at 19 + 38 blocks, where the spreading is checked).

Alimama's inpainting net at the same width (one double block and no single one, as its releases):
diffusers has no class for it; the reference is ``FluxControlNetModel`` with its
``controlnet_x_embedder`` widened to 17 channels per cell and fed the packed latent with the packed
mask channel after it (Alimama's pipeline packs the 17-channel concatenation, ComfyUI too)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from core.archs.conditioning import Conditioning
from core.archs.control import ControlInput
from core.loading.controlnet import load_controlnet
from core.models.flux import make_img_ids, make_txt_ids, pack_latents
from tests.core.generate.reference import randomize

diffusers = pytest.importorskip("diffusers")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

T5, POOLED = 24, 32


def test_real_width_union_controlnet_equals_diffusers(tmp_path: Path) -> None:
    with torch.device("meta"):  # no init: every weight is drawn below
        hf = diffusers.FluxControlNetModel(
            patch_size=1, in_channels=64, num_layers=1, num_single_layers=1, attention_head_dim=128,
            num_attention_heads=24, joint_attention_dim=T5, pooled_projection_dim=POOLED,
            guidance_embeds=True, axes_dims_rope=(16, 56, 56), num_mode=7,
        )  # fmt: skip
    randomize(hf.to_empty(device="cpu"), 41)
    path = tmp_path / "FLUX.1-dev-Controlnet-Union.safetensors"
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, str(path))

    gen = torch.Generator().manual_seed(42)
    b, h, w = 2, 4, 6
    x = torch.randn(b, 16, h, w, generator=gen)
    hint = torch.randn(1, 16, h, w, generator=gen)
    t = torch.tensor([0.55, 0.55])
    context, pooled = torch.randn(b, 7, T5, generator=gen), torch.randn(b, POOLED, generator=gen)
    cond = Conditioning(context, pooled, torch.full((b,), 3.5))
    with torch.no_grad():
        want = hf(
            hidden_states=pack_latents(x), controlnet_cond=pack_latents(hint).expand(b, -1, -1),
            controlnet_mode=torch.tensor([[2]] * b), encoder_hidden_states=cond.context,
            pooled_projections=cond.pooled, timestep=t, guidance=cond.guidance,
            img_ids=make_img_ids(1, h, w)[0], txt_ids=make_txt_ids(1, 7)[0], return_dict=False,
        )  # fmt: skip
    hf.to_empty(device="meta")
    del hf
    gc.collect()

    loaded = load_controlnet(path)
    assert (loaded.family, loaded.layout, loaded.module.hint_space) == ("flux-dev", "diffusers", "latent")
    assert loaded.control_types.index("depth") == 2
    with torch.no_grad():
        got = loaded.module.control(ControlInput(x, t, cond, t, hint, control_type=2))
    assert len(got.double) == 19 and len(got.single) == 38
    for sample, ref in ((got.double[0], want[0][0]), (got.single[37], want[1][0])):
        assert sample is not None and sample.shape == ref.shape == (b, h * w // 4, 3072)
        err = float((sample - ref).abs().max() / ref.abs().max())
        print(f"real-width union ControlNet: max relative |ours - diffusers| = {err:.1e}")
        assert err < 1e-4
    assert all(s is got.double[0] for s in got.double)  # one output spread over all 19 blocks


def test_real_width_inpainting_controlnet_equals_diffusers(tmp_path: Path) -> None:
    with torch.device("meta"):
        hf = diffusers.FluxControlNetModel(
            patch_size=1, in_channels=64, num_layers=1, num_single_layers=0, attention_head_dim=128,
            num_attention_heads=24, joint_attention_dim=T5, pooled_projection_dim=POOLED,
            guidance_embeds=True, axes_dims_rope=(16, 56, 56),
        )  # fmt: skip
        hf.controlnet_x_embedder = nn.Linear(17 * 4, 3072)
    randomize(hf.to_empty(device="cpu"), 43)
    path = tmp_path / "FLUX.1-dev-Controlnet-Inpainting-Alpha.safetensors"
    save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, str(path))

    gen = torch.Generator().manual_seed(44)
    b, h, w = 2, 4, 6
    x = torch.randn(b, 16, h, w, generator=gen)
    hint = torch.cat(
        (torch.randn(1, 16, h, w, generator=gen), (torch.rand(1, 1, h, w, generator=gen) > 0.5)), 1
    )
    t = torch.tensor([0.35, 0.35])
    context, pooled = torch.randn(b, 7, T5, generator=gen), torch.randn(b, POOLED, generator=gen)
    cond = Conditioning(context, pooled, torch.full((b,), 3.5))
    packed = torch.cat((pack_latents(hint[:, :16]), pack_latents(hint[:, 16:])), dim=-1)  # mask after
    with torch.no_grad():
        want = hf(
            hidden_states=pack_latents(x), controlnet_cond=packed.expand(b, -1, -1),
            encoder_hidden_states=cond.context, pooled_projections=cond.pooled, timestep=t,
            guidance=cond.guidance, img_ids=make_img_ids(1, h, w)[0], txt_ids=make_txt_ids(1, 7)[0],
            return_dict=False,
        )  # fmt: skip
    hf.to_empty(device="meta")
    del hf
    gc.collect()

    loaded = load_controlnet(path)
    assert loaded.module.mask_hint
    with torch.no_grad():
        got = loaded.module.control(ControlInput(x, t, cond, t, hint))
    assert len(got.double) == 19 and got.single == ()
    sample, ref = got.double[18], want[0][0]
    assert sample is not None and sample.shape == ref.shape == (b, h * w // 4, 3072)
    err = float((sample - ref).abs().max() / ref.abs().max())
    print(f"real-width inpainting ControlNet: max relative |ours - diffusers| = {err:.1e}")
    assert err < 1e-4
