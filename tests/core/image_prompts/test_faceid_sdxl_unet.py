"""FaceID at SDXL width (the MLP projection to 4 tokens of the 2048-wide context, the keys and values
of a UNet with two transformer blocks per attention, as SDXL's) against diffusers'
``IPAdapterFaceIDImageProjection`` and ``IPAdapterAttnProcessor2_0`` (``_load_ip_adapter_weights``
on UNet2DConditionModel): the same noise prediction for a negative (zero embedding, as the pack's)
and a positive row in one batch; the file's LoRA keys are not loaded (the pack's)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from core.generate.ip_adapter import AppliedIpAdapter, IpAttention, _Layer, _order
from core.loading.ip_adapter import load_ip_adapter
from core.models.patches import NetworkPatches
from tests.core.image_prompts.faceid_files import faceid_file, split_state
from tests.core.image_prompts.ip_files import sdxl_unet_pair

diffusers = pytest.importorskip("diffusers")


def test_sdxl_faceid_unet_equals_diffusers(tmp_path: Path) -> None:
    hf, ours = sdxl_unet_pair()
    path = faceid_file(tmp_path / "ip-adapter-faceid_sdxl.safetensors", hf, 2048, seed=4)
    loaded = load_ip_adapter(path)
    assert (loaded.family, loaded.variant, loaded.encoder, loaded.embeds) == ("sdxl", "faceid", None, "face")
    g = torch.Generator().manual_seed(3)
    x, t, ctx = (
        torch.randn(2, 4, 8, 8, generator=g),
        torch.tensor([600.0, 600.0]),
        torch.randn(2, 77, 2048, generator=g),
    )
    face = torch.randn(1, 512, generator=g)
    embeds = torch.cat([torch.zeros_like(face), face / face.norm()])  # negative, positive rows
    applied = AppliedIpAdapter(loaded, None, None, 0.7, (1e9, 0.0))  # type: ignore[arg-type]
    unet = copy.deepcopy(hf)
    unet._load_ip_adapter_weights([split_state(load_file(str(path)), lora=False)])
    for proc in unet.attn_processors.values():
        if hasattr(proc, "scale"):
            proc.scale = [0.7]
    with torch.no_grad():
        tokens = loaded.arch.project(loaded.module, embeds)
        assert tokens.shape == (2, 4, 2048)
        patch = IpAttention((_Layer(applied, tokens, _order(applied, ours)),))
        out = ours(x, t, ctx, patches=NetworkPatches(attention=(patch,)))
        plain = ours(x, t, ctx)
        theirs = unet(
            x, t, encoder_hidden_states=ctx, added_cond_kwargs={"image_embeds": [embeds[:, None]]}
        ).sample
    err = float((out - theirs).abs().max())
    print(f"SDXL FaceID: max |ours - diffusers| = {err:.1e}")
    assert err < 1e-4
    assert float((out - plain).abs().max()) > 1e-2
