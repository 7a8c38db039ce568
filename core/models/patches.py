"""Patch points: the places where a network lets a control or guidance feature change its forward
pass, typed (ComfyUI's ``transformer_options["patches"]`` made into small protocols).

A network declares the points it has (:class:`PatchPoints`, from ``patch_points()``) and its
``forward`` takes one :class:`NetworkPatches` value; a feature adds a patch, never a parameter.
Each point is named by a :class:`Site`: a stage the network declares (the UNet's ``input``,
``middle``, ``output`` and ``skip``; Flux's ``double`` and ``single``; SD3's ``joint``; PixArt's
``block``) and the block's number in it.

* **block patches** ``(h, site) -> h``: after a block (ComfyUI's ``input_block_patch``, the
  ControlNet residual on the UNet's middle block, FreeU's and Deep Shrink's scalings);
* **join patches** ``(h, skip, site) -> (h, skip)``: where the UNet's output side takes a skip
  connection (ComfyUI's ``output_block_patch`` and ``apply_control(hsp, "output")``); the site is
  ``("skip", i)``, the skip of input block ``i``;
* **attention patches** ``(call) -> call``: the query, keys, values and mask of one attention
  before it runs (extra keys/values for image prompts, masks for regions);
* **attention replacement** ``(call) -> out``: the attention itself (PAG/SAG);
* **skipped blocks**: sites whose block the forward leaves out, its input passed on unchanged
  (ComfyUI's ``"dit"`` block replacement by a function that returns its arguments: Skip Layer
  Guidance), at the stages a network declares skippable;
* **stream patches** ``(h, site, stage) -> h``: after a block, like a block patch, seeing also
  what the block's stage started from (:class:`StageInput`: the stage's input, the rotary angles,
  the modulation vector, where the picture's tokens lie): ComfyUI's ``noise_refiner`` and
  ``double_block`` model patches, which run a control network of their own beside the blocks
  (Z-Image's Fun ControlNet), at the stages a network declares (``streams``).

With no patches a forward computes exactly what it computes without this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, Protocol

import torch

from core.errors import ModelMismatchError
from core.models.attention import attention, attention_heads_first

AttentionKind = Literal["self", "cross", "joint"]


@dataclass(frozen=True)
class Site:
    """One patch point: a stage the network declares and the block's number in it."""

    stage: str
    index: int


class BlockPatch(Protocol):
    def __call__(self, h: torch.Tensor, site: Site) -> torch.Tensor: ...


@dataclass(frozen=True)
class StageInput:
    """What a stream patch sees beside a block's output: ``first`` the hidden state the stage's
    first block took (the same sequence as ``h``), ``pe`` the rotary angles of that sequence (as
    the network's blocks take them), ``vec`` the modulation vector, and ``image`` (start, count):
    where the picture's own tokens lie in the sequence (not the network's pad tokens)."""

    first: torch.Tensor
    pe: torch.Tensor
    vec: torch.Tensor
    image: tuple[int, int]


class StreamPatch(Protocol):
    def __call__(self, h: torch.Tensor, site: Site, stage: StageInput) -> torch.Tensor: ...


class JoinPatch(Protocol):
    def __call__(
        self, h: torch.Tensor, skip: torch.Tensor, site: Site
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


@dataclass(frozen=True)
class ExtraAttention:
    """A second attention of the same queries over keys and values of its own, added to the
    attention's output times ``weight``: decoupled cross-attention (IP-Adapter's image tokens:
    ``out = attn(q, k, v) + weight * attn(q, k_ip, v_ip)``). ``k``/``v`` (B, L, H*D); ``weight`` a
    number or a tensor broadcastable to the output (B, Lq, H*D): one factor per query token for a
    masked image prompt."""

    k: torch.Tensor
    v: torch.Tensor
    weight: float | torch.Tensor


@dataclass(frozen=True)
class AttentionCall:
    """One attention about to run: ``q`` (B, Lq, H*D), ``k``/``v`` (B, Lk, H*D), ``mask`` boolean
    (True = attend) or additive, broadcastable to (B, H, Lq, Lk). ``layer`` numbers the attention
    layers inside the block at ``site``. ``extra``: attentions over other keys and values whose
    weighted outputs are added to this one's (:class:`ExtraAttention`)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    heads: int
    site: Site
    layer: int
    kind: AttentionKind
    mask: torch.Tensor | None = None
    extra: tuple[ExtraAttention, ...] = ()


class AttentionPatch(Protocol):
    def __call__(self, call: AttentionCall) -> AttentionCall: ...


class AttentionReplace(Protocol):
    def __call__(self, call: AttentionCall) -> torch.Tensor: ...


@dataclass(frozen=True)
class NetworkPatches:
    """Every patch of one forward pass, applied in order at each point."""

    blocks: tuple[BlockPatch, ...] = ()
    joins: tuple[JoinPatch, ...] = ()
    attention: tuple[AttentionPatch, ...] = ()
    replace_attention: AttentionReplace | None = None
    skip: frozenset[Site] = frozenset()
    streams: tuple[StreamPatch, ...] = ()

    def __add__(self, other: NetworkPatches) -> NetworkPatches:
        if other.replace_attention is not None and self.replace_attention is not None:
            raise ModelMismatchError(
                "two features both replace the network's attention",
                why="only one attention replacement can run at a point",
                fix="Use one of them",
                code="bad_argument",
            )
        return NetworkPatches(
            self.blocks + other.blocks,
            self.joins + other.joins,
            self.attention + other.attention,
            self.replace_attention or other.replace_attention,
            self.skip | other.skip,
            self.streams + other.streams,
        )

    @property
    def patches_attention(self) -> bool:
        return bool(self.attention) or self.replace_attention is not None

    def block(self, h: torch.Tensor, site: Site) -> torch.Tensor:
        for patch in self.blocks:
            h = patch(h, site)
        return h

    def stream(self, h: torch.Tensor, site: Site, stage: StageInput) -> torch.Tensor:
        """The stream patches at ``site``; a network builds ``stage`` only when it has some."""
        for patch in self.streams:
            h = patch(h, site, stage)
        return h

    def join(self, h: torch.Tensor, skip: torch.Tensor, site: Site) -> tuple[torch.Tensor, torch.Tensor]:
        for patch in self.joins:
            h, skip = patch(h, skip, site)
        return h, skip

    def attend(self, call: AttentionCall) -> torch.Tensor:
        """The attention of ``call`` with the patches applied (or replaced)."""
        for patch in self.attention:
            call = patch(call)
        if self.replace_attention is not None:
            out = self.replace_attention(call)
        else:
            out = attention(call.q, call.k, call.v, call.heads, call.mask)
        for more in call.extra:
            out = out + attention(call.q, more.k, more.v, call.heads) * more.weight
        return out


NO_PATCHES = NetworkPatches()


@dataclass(frozen=True)
class AttentionRoute:
    """What a block hands its attention layers: the forward's patches and the block's site."""

    patches: NetworkPatches
    site: Site

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, layer: int, kind: AttentionKind
    ) -> torch.Tensor:
        if not self.patches.patches_attention:
            return attention(q, k, v, heads)
        return self.patches.attend(AttentionCall(q, k, v, heads, self.site, layer, kind))


def attend_heads(
    route: AttentionRoute | None,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layer: int,
    kind: AttentionKind,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention on heads-first (B, H, L, D) tensors -> (B, Lq, H*D), as the DiTs compute it (RoPE
    and q/k norms already applied): exactly :func:`attention_heads_first` without attention patches
    (``route`` None or holding none), else the route's patches on the call with q, k and v laid out
    as (B, L, H*D)."""
    if route is None or not route.patches.patches_attention:
        return attention_heads_first(q, k, v, mask)
    b, heads, _, d = q.shape

    def flat(t: torch.Tensor) -> torch.Tensor:
        return t.transpose(1, 2).reshape(b, t.shape[2], heads * d)

    call = AttentionCall(flat(q), flat(k), flat(v), heads, route.site, layer, kind, mask)
    return route.patches.attend(call)


def attention_route(patches: NetworkPatches, stage: str, index: int) -> AttentionRoute | None:
    """The route a block at ``(stage, index)`` hands its attention: None when ``patches`` hold no
    attention patch (the forward then runs exactly as without this module)."""
    return AttentionRoute(patches, Site(stage, index)) if patches.patches_attention else None


@dataclass(frozen=True)
class PatchPoints:
    """The points a network has: ``blocks`` stage -> number of sites, ``joins`` the skip
    connections (UNet), ``attention`` the attention kinds its layers route through patches,
    ``skips`` the stages whose blocks a forward can leave out, ``streams`` the stages that take
    stream patches."""

    blocks: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    joins: int = 0
    attention: tuple[AttentionKind, ...] = ()
    skips: tuple[str, ...] = ()
    streams: tuple[str, ...] = ()

    def require(
        self,
        feature: str,
        code: str,
        *,
        blocks: tuple[str, ...] = (),
        joins: int | None = None,
        attention: tuple[AttentionKind, ...] = (),
        skips: tuple[str, ...] = (),
        streams: tuple[str, ...] = (),
        fix: str = "",
    ) -> None:
        """Refuse a feature whose patches need points this network lacks, in words. ``joins``
        0 asks for some skip connections, whatever their number."""
        missing = [f"its {stage} blocks" for stage in blocks if stage not in self.blocks]
        if joins == 0 and not self.joins:
            missing.append("skip connections")
        elif joins and joins != self.joins:
            missing.append(f"{joins} skip connections (it has {self.joins})")
        missing += [f"patchable {kind}-attention" for kind in attention if kind not in self.attention]
        missing += [f"{stage} blocks that can be left out" for stage in skips if stage not in self.skips]
        missing += [
            f"a control stream beside its {stage} blocks" for stage in streams if stage not in self.streams
        ]
        if missing:
            raise ModelMismatchError(
                f"{feature} does not fit this diffusion model",
                why="it changes " + ", ".join(missing) + ", which this network does not have",
                fix=fix or f"Use {feature} made for the loaded model's family",
                code=code,
            )
