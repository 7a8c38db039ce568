"""The networks' patch points (core.models.patches) on tiny real networks (seeded random weights):
every declared point is reached once per forward, in order, and a patch there changes the output;
no patches (or patches that give back what they get) compute exactly the unpatched forward; the
UNet's attention patches add keys and values, mask them and replace the attention."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from core.models.attention import attention
from core.models.patches import AttentionCall, NetworkPatches, Site
from core.models.unet import UNetModel
from tests.fixtures.tiny_models import (
    FORWARD,
    TINY_CHROMA,
    TINY_FLUX,
    TINY_MMDIT,
    TINY_PIXART,
    TINY_UNET_SDXL,
    Tiny,
)

NETWORKS = [TINY_UNET_SDXL, TINY_MMDIT, TINY_FLUX, TINY_CHROMA, TINY_PIXART]


def _forward(tiny: Tiny, module: Any, patches: NetworkPatches | None = None) -> torch.Tensor:
    call = module if patches is None else (lambda *a: module(*a, patches=patches))
    with torch.no_grad():
        return FORWARD[tiny.architecture.name](call, tiny.config)[0]


@pytest.mark.parametrize("tiny", NETWORKS, ids=lambda t: t.name)
def test_every_declared_block_point_is_reached_in_order_and_changes_the_output(tiny: Tiny) -> None:
    module = tiny.reference()
    points = module.patch_points()
    seen: list[Site] = []

    def record(h: torch.Tensor, site: Site) -> torch.Tensor:
        seen.append(site)
        return h

    plain = _forward(tiny, module)
    same = _forward(tiny, module, NetworkPatches(blocks=(record,)))
    assert torch.equal(same, plain)
    counted: dict[str, int] = {}
    for site in seen:
        assert site.index == counted.get(site.stage, 0)  # numbered in order within each stage
        counted[site.stage] = site.index + 1
    assert counted == dict(points.blocks)

    where = Site(next(iter(points.blocks)), 0)  # the first block: later ones feed scale-free norms

    def scale(h: torch.Tensor, site: Site) -> torch.Tensor:
        return h * 1.5 if site == where else h

    assert not torch.allclose(_forward(tiny, module, NetworkPatches(blocks=(scale,))), plain, atol=1e-4)


def _unet() -> UNetModel:
    module = TINY_UNET_SDXL.reference()
    assert isinstance(module, UNetModel)
    return module


def _unet_inputs(tokens: int = 5) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(4)
    cfg = TINY_UNET_SDXL.config
    x = torch.randn(2, cfg.in_channels, 8, 8, generator=g)
    ctx = torch.randn(2, tokens, cfg.context_dim, generator=g)
    y = torch.randn(2, cfg.adm_in_channels, generator=g)
    return x, torch.tensor([10.0, 500.0]), ctx, y


def _cross_modules(unet: UNetModel) -> dict[tuple[Site, int], Any]:
    """Each cross-attention layer by (its block's site, its transformer block's number)."""
    found = {}
    for stage, blocks in (
        ("input", unet.input_blocks),
        ("middle", [unet.middle_block]),
        ("output", unet.output_blocks),
    ):
        for i, block in enumerate(blocks):
            for layer in block:
                for d, tb in enumerate(getattr(layer, "transformer_blocks", [])):
                    found[(Site(stage, i), d)] = tb.attn2
    return found


def test_extra_keys_and_values_on_cross_attention_equal_a_longer_prompt() -> None:
    """What an image prompt's patch does (IP-Adapter's extra keys and values), checked against the
    same tokens appended to the context: softmax attention over both is the same sum."""
    unet = _unet()
    x, t, ctx, y = _unet_inputs(tokens=8)
    prompt, extra = ctx[:, :5], ctx[:, 5:]
    layers = _cross_modules(unet)
    assert layers

    def more_tokens(call: AttentionCall) -> AttentionCall:
        if call.kind != "cross":
            return call
        attn = layers[(call.site, call.layer)]
        k = torch.cat([call.k, attn.to_k(extra)], dim=1)
        v = torch.cat([call.v, attn.to_v(extra)], dim=1)
        return AttentionCall(
            k=k, v=v, q=call.q, heads=call.heads, site=call.site, layer=call.layer, kind=call.kind
        )

    with torch.no_grad():
        longer = unet(x, t, ctx, y)
        patched = unet(x, t, prompt, y, patches=NetworkPatches(attention=(more_tokens,)))
        plain = unet(x, t, prompt, y)
    assert torch.allclose(patched, longer, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(patched, plain, atol=1e-3)

    def masked(call: AttentionCall) -> AttentionCall:  # the extra tokens masked out: the plain prompt
        call = more_tokens(call)
        if call.kind != "cross":
            return call
        keep = (torch.arange(call.k.shape[1]) < 5).reshape(1, 1, 1, -1)
        return AttentionCall(call.q, call.k, call.v, call.heads, call.site, call.layer, call.kind, keep)

    with torch.no_grad():
        hidden = unet(x, t, prompt, y, patches=NetworkPatches(attention=(masked,)))
    assert torch.allclose(hidden, plain, atol=1e-5, rtol=1e-5)


def test_replaced_attention_is_used_everywhere_and_the_plain_one_changes_nothing() -> None:
    unet = _unet()
    x, t, ctx, y = _unet_inputs()
    calls: list[AttentionCall] = []

    def same(call: AttentionCall) -> torch.Tensor:
        calls.append(call)
        return attention(call.q, call.k, call.v, call.heads, call.mask)

    def identity(call: AttentionCall) -> torch.Tensor:  # PAG's perturbed path: values pass through
        return call.v if call.kind == "self" else attention(call.q, call.k, call.v, call.heads)

    with torch.no_grad():
        plain = unet(x, t, ctx, y)
        again = unet(x, t, ctx, y, patches=NetworkPatches(replace_attention=same))
        perturbed = unet(x, t, ctx, y, patches=NetworkPatches(replace_attention=identity))
    assert torch.equal(again, plain)
    assert {c.kind for c in calls} == {"self", "cross"}
    assert len(calls) == 2 * len(_cross_modules(unet))
    assert not torch.allclose(perturbed, plain, atol=1e-3)
    with pytest.raises(Exception, match="replace the network's attention"):
        _ = NetworkPatches(replace_attention=same) + NetworkPatches(replace_attention=identity)


def test_a_feature_needing_points_a_network_lacks_is_refused_in_words() -> None:
    from core.errors import ModelMismatchError

    mmdit = TINY_MMDIT.reference().patch_points()
    with pytest.raises(ModelMismatchError) as err:
        mmdit.require("this ControlNet", "wrong_controlnet", blocks=("middle",), joins=4)
    assert err.value.code == "wrong_controlnet"
    assert "middle blocks" in str(err.value) and "4 skip connections (it has 0)" in str(err.value)
    unet = _unet().patch_points()
    unet.require("this ControlNet", "wrong_controlnet", blocks=("middle",), joins=unet.joins)
    with pytest.raises(ModelMismatchError, match="skip connections"):
        unet.require("this ControlNet", "wrong_controlnet", blocks=("middle",), joins=unet.joins + 3)


@pytest.mark.parametrize("tiny", NETWORKS, ids=lambda t: t.name)
def test_a_skipped_block_is_left_out_where_the_network_declares_it_can_be(tiny: Tiny) -> None:
    """SD3's joint blocks and Flux's double/single blocks can be left out (Skip Layer Guidance):
    the forward then equals one where that block hands its input on unchanged; an empty skip set
    changes nothing."""
    module = tiny.reference()
    points = module.patch_points()
    plain = _forward(tiny, module)
    assert torch.equal(_forward(tiny, module, NetworkPatches(skip=frozenset())), plain)
    for stage in points.skips:
        skipped = _forward(tiny, module, NetworkPatches(skip=frozenset({Site(stage, 0)})))
        assert not torch.allclose(skipped, plain, atol=1e-4), stage
    if tiny is TINY_MMDIT:
        blocks = module.joint_blocks
        first = blocks[0]
        blocks[0] = _Identity()
        try:
            by_hand = _forward(tiny, module)
        finally:
            blocks[0] = first
        skip_first = NetworkPatches(skip=frozenset({Site("joint", 0)}))
        assert torch.equal(_forward(tiny, module, skip_first), by_hand)


class _Identity(torch.nn.Module):
    """A joint block that hands its text and picture tokens on unchanged (ComfyUI's ``skip``)."""

    def forward(
        self, ctx: torch.Tensor, tokens: torch.Tensor, c: torch.Tensor, route: object = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return ctx, tokens
