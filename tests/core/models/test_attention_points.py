"""Attention patch points on the transformer networks (MMDiT, Flux, Chroma, FLUX.2, PixArt, Next-DiT,
Qwen-Image), as the UNet has them: tiny real networks with seeded weights. Every declared attention
kind is routed, at every block's site; a patch that gives back what it gets and a replacement that
computes the plain attention give the unpatched forward to the bit; extra keys and values masked
out give the plain forward back (to float precision) and change it unmasked; a replacement that
zeroes one site's attention changes the output."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
import torch
from torch import nn

from core.models.attention import attention
from core.models.flux2 import Flux2, Flux2Config, image_ids, image_tokens, text_ids
from core.models.nextdit import NextDiT, NextDiTConfig
from core.models.patches import AttentionCall, NetworkPatches, Site
from core.models.qwen_image.config import QwenImageConfig
from core.models.qwen_image.network import QwenImageDiT
from tests.fixtures.tiny_models import (
    FORWARD,
    TINY_CHROMA,
    TINY_FLUX,
    TINY_MMDIT,
    TINY_MMDIT_35M,
    TINY_PIXART,
    Tiny,
    random_state,
)

Run = Callable[[nn.Module, NetworkPatches | None], torch.Tensor]


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], nn.Module]
    run: Run


def _tiny(tiny: Tiny) -> Case:
    def run(module: nn.Module, patches: NetworkPatches | None) -> torch.Tensor:
        call = module if patches is None else (lambda *a: module(*a, patches=patches))
        return FORWARD[tiny.architecture.name](call, tiny.config)[0]  # type: ignore[arg-type]

    return Case(tiny.name, tiny.reference, run)


def _seeded(module: nn.Module, seed: int) -> nn.Module:
    module.load_state_dict(random_state(module, seed), strict=True, assign=True)
    return module.eval()


def _flux2() -> Case:
    cfg = Flux2Config(context_in_dim=64, hidden_size=256, num_heads=2, depth=2, depth_single_blocks=2)

    def run(module: nn.Module, patches: NetworkPatches | None) -> torch.Tensor:
        g = torch.Generator().manual_seed(1)
        x, ctx = torch.randn(2, 128, 3, 4, generator=g), torch.randn(2, 5, 64, generator=g)
        args = (image_tokens(x), image_ids(2, 3, 4), ctx, text_ids(2, 5), torch.tensor([0.9, 0.4]))
        out: torch.Tensor = module(*args, torch.tensor([4.0, 2.5]), patches=patches or NetworkPatches())
        return out

    return Case("flux2", lambda: _seeded(Flux2(cfg, device="meta"), 21), run)


def _latent_net(name: str, build: Callable[[], nn.Module], width: int, tokens: int) -> Case:
    """Next-DiT and Qwen-Image: ``forward(x, sigma, context, patches)`` on a latent."""

    def run(module: nn.Module, patches: NetworkPatches | None) -> torch.Tensor:
        g = torch.Generator().manual_seed(2)
        x, ctx = torch.randn(2, 16, 6, 4, generator=g), torch.randn(2, tokens, width, generator=g)
        out: torch.Tensor = module(x, torch.tensor([0.9, 0.4]), ctx, patches or NetworkPatches())
        return out

    return Case(name, build, run)


Z_IMAGE = NextDiTConfig(dim=256, n_layers=2, n_refiner_layers=1, n_heads=2, n_kv_heads=2, ffn_hidden=256,
                        cap_feat_dim=48)  # fmt: skip
LUMINA2 = NextDiTConfig.lumina2(dim=192, n_layers=2, n_refiner_layers=1, n_heads=2, n_kv_heads=1,
                                ffn_hidden=192, cap_feat_dim=40)  # fmt: skip
QWEN = QwenImageConfig(dim=256, n_layers=2, n_heads=2, mlp_hidden=256, context_dim=64)

CASES = [
    _tiny(TINY_MMDIT), _tiny(TINY_MMDIT_35M), _tiny(TINY_FLUX), _tiny(TINY_CHROMA), _tiny(TINY_PIXART),
    _flux2(),
    _latent_net("z-image", lambda: _seeded(NextDiT(Z_IMAGE, device="meta"), 22), 48, 7),
    _latent_net("lumina2", lambda: _seeded(NextDiT(LUMINA2, device="meta"), 23), 40, 7),
    _latent_net("qwen-image", lambda: _seeded(QwenImageDiT(QWEN, device="meta"), 24), 64, 5),
]  # fmt: skip


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c.name)
def net(request: pytest.FixtureRequest) -> tuple[Case, nn.Module, torch.Tensor]:
    case: Case = request.param
    module = case.build()
    with torch.no_grad():
        return case, module, case.run(module, None)


def _forward(case: Case, module: nn.Module, patches: NetworkPatches) -> torch.Tensor:
    with torch.no_grad():
        return case.run(module, patches)


def _sites(module: Any) -> set[Site]:
    """Every block site of the network: its declared block stages, and Next-DiT's refiners."""
    sites = {Site(stage, i) for stage, n in module.patch_points().blocks.items() for i in range(n)}
    for stage in ("context_refiner", "noise_refiner"):
        sites |= {Site(stage, i) for i in range(len(getattr(module, stage, ())))}
    return sites


def test_every_block_routes_each_declared_attention_kind_and_a_pass_through_changes_nothing(
    net: tuple[Case, nn.Module, torch.Tensor],
) -> None:
    case, module, plain = net
    points = module.patch_points()  # type: ignore[operator]
    seen: list[AttentionCall] = []

    def record(call: AttentionCall) -> AttentionCall:
        seen.append(call)
        return call

    def plain_attention(call: AttentionCall) -> torch.Tensor:
        return attention(call.q, call.k, call.v, call.heads, call.mask)

    assert torch.equal(_forward(case, module, NetworkPatches(attention=(record,))), plain)
    assert torch.equal(_forward(case, module, NetworkPatches(replace_attention=plain_attention)), plain)
    assert points.attention and {c.kind for c in seen} == set(points.attention)
    assert {c.site for c in seen} == _sites(module)
    for call in seen:  # the calls are laid out as the protocol says: (B, L, heads * head width)
        assert call.q.ndim == call.k.ndim == call.v.ndim == 3 and call.q.shape[-1] % call.heads == 0
        assert call.k.shape[:2] == call.v.shape[:2]


def _extra(call: AttentionCall, tokens: torch.Tensor, masked: bool) -> AttentionCall:
    """``call`` with ``tokens`` as extra keys and values (an image prompt's), masked out or not."""
    b, lq, lk, n = call.q.shape[0], call.q.shape[1], call.k.shape[1], tokens.shape[1]
    k, v = torch.cat((call.k, tokens), dim=1), torch.cat((call.v, tokens.flip(1)), dim=1)
    old = call.mask if call.mask is not None else torch.ones(1, 1, 1, lk, dtype=torch.bool)
    old = old if old.dtype == torch.bool else old == 0  # the networks' masks are boolean or 0 / -inf
    old = old.expand(b, -1, lq, lk) if old.shape[0] == 1 else old.expand(-1, -1, lq, lk)
    mask = torch.cat((old, torch.full((b, 1, lq, n), not masked)), dim=-1)
    return replace(call, k=k, v=v, mask=mask)


def test_extra_keys_and_values_change_the_output_and_masked_out_they_do_not(
    net: tuple[Case, nn.Module, torch.Tensor],
) -> None:
    case, module, plain = net
    gen = torch.Generator().manual_seed(5)
    extra: dict[int, torch.Tensor] = {}

    def tokens(call: AttentionCall) -> torch.Tensor:
        width = call.k.shape[-1]
        if width not in extra:
            extra[width] = torch.randn(1, 3, width, generator=gen)
        return extra[width].expand(call.k.shape[0], -1, -1)

    hidden = _forward(case, module, NetworkPatches(attention=(lambda c: _extra(c, tokens(c), True),)))
    shown = _forward(case, module, NetworkPatches(attention=(lambda c: _extra(c, tokens(c), False),)))
    assert torch.allclose(hidden, plain, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(shown, plain, atol=1e-3)


def test_a_replacement_that_zeroes_one_site_changes_the_output(
    net: tuple[Case, nn.Module, torch.Tensor],
) -> None:
    case, module, plain = net
    first = min(_sites(module), key=lambda s: (s.stage not in module.patch_points().blocks, s.stage, s.index))  # type: ignore[operator]

    def zero_first(call: AttentionCall) -> torch.Tensor:
        out = attention(call.q, call.k, call.v, call.heads, call.mask)
        return torch.zeros_like(out) if call.site == first else out

    changed = _forward(case, module, NetworkPatches(replace_attention=zero_first))
    assert not torch.allclose(changed, plain, atol=1e-4)
