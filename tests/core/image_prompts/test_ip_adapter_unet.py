"""IP-Adapter on the UNet against diffusers' IPAdapterAttnProcessor2_0 (load_ip_adapter's weights on
UNet2DConditionModel): the same noise prediction for the base and plus layouts, per-row tokens
(negative and positive in one batch), the weight, and the sigma range leaving the UNet as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.generate.ip_adapter import AppliedIpAdapter, IpAdapterStack, IpAttention, _Layer, _order
from core.loading.ip_adapter import load_ip_adapter
from core.models.patches import NetworkPatches
from core.sampling.conditioning import Conditioning
from core.sampling.patches import ModelCall
from tests.core.image_prompts.ip_files import diffusers_state, ip_adapter_file, sdxl_unet_pair, unet_pair

diffusers = pytest.importorskip("diffusers")


@pytest.fixture(scope="module")
def pair() -> tuple[Any, Any]:
    return unet_pair()


def _embeds(plus: bool, batch: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(5)
    return torch.randn(batch, 257, 1280, generator=g) if plus else torch.randn(batch, 1024, generator=g)


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return (
        torch.randn(2, 4, 8, 8, generator=g),
        torch.tensor([700.0, 700.0]),
        torch.randn(2, 77, 768, generator=g),
    )


@pytest.mark.parametrize(("plus", "weight"), [(False, 1.0), (True, 0.6)])
def test_ip_adapter_unet_equals_diffusers(
    pair: tuple[Any, Any], tmp_path: Path, plus: bool, weight: float
) -> None:
    hf, ours = pair
    path = ip_adapter_file(
        tmp_path / ("ip-adapter-plus_sd15.safetensors" if plus else "ip-adapter_sd15.safetensors"), plus=plus
    )
    loaded = load_ip_adapter(path)
    assert (loaded.family, loaded.variant, loaded.encoder) == ("sd1", "plus" if plus else None, "clip-vit-h")
    x, t, ctx = _inputs()
    embeds = _embeds(plus, 2)
    applied = AppliedIpAdapter(loaded, None, None, weight, (1e9, 0.0))  # type: ignore[arg-type]
    with torch.no_grad():
        tokens = loaded.arch.project(loaded.module, embeds)
        patch = IpAttention((_Layer(applied, tokens, _order(applied, ours)),))
        out = ours(x, t, ctx, patches=NetworkPatches(attention=(patch,)))
        plain = ours(x, t, ctx)
        unet = _with_adapter(hf, path, weight)
        theirs = unet(
            x, t, encoder_hidden_states=ctx, added_cond_kwargs={"image_embeds": [embeds[:, None]]}
        ).sample
    err = float((out - theirs).abs().max())
    print(f"plus={plus} weight={weight}: max |ours - diffusers| = {err:.1e}")
    assert err < 1e-4
    assert float((out - plain).abs().max()) > 1e-2


def test_full_face_adapter_equals_diffusers(pair: tuple[Any, Any], tmp_path: Path) -> None:
    """h94's ip-adapter-full-face_sd15 layout (the MLP projection over ViT-H's 257 penultimate
    states: 257 tokens) against diffusers' IPAdapterFullImageProjection."""
    hf, ours = pair
    path = ip_adapter_file(tmp_path / "ip-adapter-full-face_sd15.safetensors", plus=False, full=True)
    loaded = load_ip_adapter(path)
    assert (loaded.variant, loaded.encoder, loaded.embeds) == ("full-face", "clip-vit-h", "penultimate")
    x, t, ctx = _inputs()
    embeds = _embeds(True, 2)
    applied = AppliedIpAdapter(loaded, None, None, 0.7, (1e9, 0.0))  # type: ignore[arg-type]
    with torch.no_grad():
        tokens = loaded.arch.project(loaded.module, embeds)
        assert tokens.shape == (2, 257, 768)
        patch = IpAttention((_Layer(applied, tokens, _order(applied, ours)),))
        out = ours(x, t, ctx, patches=NetworkPatches(attention=(patch,)))
        unet = _with_adapter(hf, path, 0.7)
        theirs = unet(
            x, t, encoder_hidden_states=ctx, added_cond_kwargs={"image_embeds": [embeds[:, None]]}
        ).sample
        plain = ours(x, t, ctx)
    err = float((out - theirs).abs().max())
    print(f"full-face: max |ours - diffusers| = {err:.1e}")
    assert err < 1e-4
    assert float((out - plain).abs().max()) > 1e-2


@pytest.mark.parametrize("plus", [False, True])
def test_sdxl_width_adapter_with_two_transformer_blocks_equals_diffusers(tmp_path: Path, plus: bool) -> None:
    hf, ours = sdxl_unet_pair()
    path = ip_adapter_file(tmp_path / "ip-adapter_sdxl_vit-h.safetensors", plus=plus, sdxl=True)
    loaded = load_ip_adapter(path)
    assert (loaded.family, loaded.encoder) == ("sdxl", "clip-vit-h")
    g = torch.Generator().manual_seed(3)
    x, t, ctx = (
        torch.randn(2, 4, 8, 8, generator=g),
        torch.tensor([600.0, 600.0]),
        torch.randn(2, 77, 2048, generator=g),
    )
    embeds = _embeds(plus, 2)
    applied = AppliedIpAdapter(loaded, None, None, 0.8, (1e9, 0.0))  # type: ignore[arg-type]
    with torch.no_grad():
        tokens = loaded.arch.project(loaded.module, embeds)
        patch = IpAttention((_Layer(applied, tokens, _order(applied, ours)),))
        out = ours(x, t, ctx, patches=NetworkPatches(attention=(patch,)))
        unet = _with_adapter(hf, path, 0.8)
        theirs = unet(
            x, t, encoder_hidden_states=ctx, added_cond_kwargs={"image_embeds": [embeds[:, None]]}
        ).sample
    assert float((out - theirs).abs().max()) < 1e-4


def _with_adapter(hf: Any, path: Path, weight: float) -> Any:
    import copy

    unet = copy.deepcopy(hf)
    unet._load_ip_adapter_weights([diffusers_state(path)])
    for proc in unet.attn_processors.values():
        if hasattr(proc, "scale"):
            proc.scale = [weight]
    return unet


def test_outside_its_range_the_unet_is_unchanged(pair: tuple[Any, Any], tmp_path: Path) -> None:
    _, ours = pair
    loaded = load_ip_adapter(ip_adapter_file(tmp_path / "ip.safetensors", plus=False))
    x, t, ctx = _inputs()
    with torch.no_grad():
        tokens = loaded.arch.project(loaded.module, _embeds(False, 2))
    applied = AppliedIpAdapter(loaded, None, None, 1.0, (10.0, 5.0))  # type: ignore[arg-type]
    stack = IpAdapterStack((applied,), (_order(applied, ours),))
    cond = Conditioning(ctx, image_prompts=(tokens,))

    def run(sigma: float) -> torch.Tensor:
        call = ModelCall(x, t, cond, torch.tensor([sigma, sigma]))
        with torch.no_grad():
            return stack(call, lambda c: ours(c.x, c.timestep, c.cond.context, patches=c.patches))

    with torch.no_grad():
        plain = ours(x, t, ctx)
    assert torch.equal(run(4.0), plain) and torch.equal(run(11.0), plain)
    assert float((run(7.0) - plain).abs().max()) > 1e-2
