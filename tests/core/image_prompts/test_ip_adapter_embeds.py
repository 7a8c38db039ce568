"""IP-Adapter's embeds scalings on the UNet, against diffusers' UNet2DConditionModel with the same
file loaded by ``_load_ip_adapter_weights`` and its image keys and values changed as
ComfyUI_IPAdapter_plus's ``ipadapter_attention`` changes them (written here from the pack's
source): ``K+V`` scales ``to_k_ip`` and ``to_v_ip`` by the weight (diffusers' scale 1), ``K+V w/ C
penalty`` by the weight times the layer's key width / 1280, ``K+mean(V) w/ C penalty`` the keys so
and each picture's values as ``(v - mean) + mean * w'`` (the mean over one picture's tokens, also
with two pictures' tokens side by side). diffusers has no embeds scaling of its own: these
processors are the golden."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from core.generate.ip_adapter import AppliedIpAdapter, IpAttention, _Layer, _order
from core.generate.ip_embeds import concat_pictures
from core.loading.ip_adapter import load_ip_adapter
from core.models.patches import NetworkPatches
from tests.core.image_prompts.ip_files import diffusers_state, ip_adapter_file, unet_pair

diffusers = pytest.importorskip("diffusers")
pytestmark = pytest.mark.usefixtures("one_thread")


class _MeanV(nn.Module):
    """The pack's ``K+mean(V)`` values: ``(v - m) + m * w`` with ``m`` each picture's mean."""

    def __init__(self, linear: nn.Module, w: float, per_picture: int) -> None:
        super().__init__()
        self.linear, self.w, self.per = linear, w, per_picture

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.linear(x)  # (B, T, C) or, with several pictures, (B, N, T, C)
        g = v.reshape(v.shape[0], -1, self.per, v.shape[-1])
        m = g.mean(2, keepdim=True)
        return ((g - m) + m * self.w).reshape(v.shape)


def _pack_unet(with_adapter: Any, weight: float, scaling: str, per_picture: int) -> Any:
    unet = copy.deepcopy(with_adapter)
    for proc in unet.attn_processors.values():
        if not hasattr(proc, "scale"):
            continue
        width = proc.to_k_ip[0].weight.shape[0]
        w = weight * width / 1280 if "penalty" in scaling else weight
        with torch.no_grad():
            proc.to_k_ip[0].weight *= w
            if scaling == "K+mean(V) w/ C penalty":
                proc.to_v_ip[0] = _MeanV(proc.to_v_ip[0], w, per_picture)
            else:
                proc.to_v_ip[0].weight *= w
        proc.scale = [1.0]
    return unet


@pytest.fixture(scope="module")
def pair() -> tuple[Any, Any]:
    return unet_pair()


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory, pair: tuple[Any, Any]) -> dict[bool, tuple[Any, Any]]:
    """Per layout (plus or not): the adapter loaded by Loadout and diffusers' UNet with it loaded."""
    root = tmp_path_factory.mktemp("ipa_embeds")
    out = {}
    for plus in (False, True):
        path = ip_adapter_file(root / f"ip-adapter{'-plus' if plus else ''}_sd15.safetensors", plus=plus)
        unet = copy.deepcopy(pair[0])
        unet._load_ip_adapter_weights([diffusers_state(path)])
        out[plus] = (load_ip_adapter(path), unet)
    return out


@pytest.mark.parametrize(
    ("scaling", "plus", "pictures"),
    [
        ("K+V", False, 1),
        ("K+V w/ C penalty", True, 1),
        ("K+mean(V) w/ C penalty", True, 1),
        ("K+mean(V) w/ C penalty", False, 2),  # the mean per picture, the two side by side
    ],
)
def test_embeds_scaling_equals_the_packs_keys_and_values_in_diffusers(
    pair: tuple[Any, Any], adapters: dict[bool, tuple[Any, Any]], scaling: str, plus: bool, pictures: int
) -> None:
    ours = pair[1]
    loaded, with_adapter = adapters[plus]
    g = torch.Generator().manual_seed(7)
    x, t, ctx = (
        torch.randn(2, 4, 8, 8, generator=g),
        torch.tensor([700.0, 700.0]),
        torch.randn(2, 77, 768, generator=g),
    )
    shape = (2, pictures, 257, 1280) if plus else (2, pictures, 1024)
    embeds = torch.randn(shape, generator=g)
    weight = 2.5 if "penalty" in scaling else 0.7
    more = tuple(np.zeros((1, 1, 3), np.uint8) for _ in range(pictures - 1))
    applied = AppliedIpAdapter(
        loaded,
        None,
        None,
        weight,
        (1e9, 0.0),
        scaling=scaling,
        pictures=more,  # type: ignore[arg-type]
    )
    with torch.no_grad():
        projected = loaded.arch.project(loaded.module, embeds.flatten(0, 1))
        tokens = torch.cat([concat_pictures(row) for row in projected.unflatten(0, (2, pictures))])
        patch = IpAttention((_Layer(applied, tokens, _order(applied, ours)),))
        out = ours(x, t, ctx, patches=NetworkPatches(attention=(patch,)))
        v_only = ours(x, t, ctx, patches=NetworkPatches(attention=(IpAttention((_Layer(
            AppliedIpAdapter(loaded, None, None, weight, (1e9, 0.0), pictures=more),  # type: ignore[arg-type]
            tokens, _order(applied, ours)),)),)))  # fmt: skip
        unet = _pack_unet(with_adapter, weight, scaling, projected.shape[1])
        theirs = unet(x, t, encoder_hidden_states=ctx, added_cond_kwargs={"image_embeds": [embeds]}).sample
    err = float((out - theirs).abs().max())
    print(f"{scaling} plus={plus} pictures={pictures}: max |ours - golden| = {err:.1e}")
    assert err < 1e-4
    assert float((out - v_only).abs().max()) > 1e-2  # the scaling is not V only
