"""Image prompts with IP-Adapter (SD1.5, SDXL), applied as ComfyUI_IPAdapter_plus's IPAdapterAdvanced
applies them (the weight types and attention mask: :mod:`core.generate.ip_weights`; the embeds
scalings and several pictures' combinations: :mod:`core.generate.ip_embeds`):

* **encoding** (before the prompts): the picture through the CLIP vision tower as
  ``CLIPVisionEncode`` prepares it (:mod:`core.archs.clip_vision.preprocess`), the tower's
  ``image_embeds`` (base adapters) or penultimate hidden states (plus, plus-face, full-face) through the
  adapter's image projection: the picture's tokens. The negative prompt's tokens are the
  projection of what ComfyUI_IPAdapter_plus feeds it: for plus, the tower's penultimate states of an
  all-black 224x224 picture (zeros in [0, 1], so ``-mean/std`` once normalised); for base, zero
  embeddings (``torch.zeros_like``). diffusers' ``prepare_ip_adapter_image_embeds`` zeroes the
  normalised pixels instead (a mid-grey picture) for plus; Loadout follows ComfyUI.
* **the patch** (every network call of the stages the base model samples): a model wrapper that,
  while the call's sigma is in the adapter's start/end range (``percent_to_sigma``, as
  ControlNets), adds to each cross-attention of the UNet the attention of the same queries over
  the adapter's keys and values of the image tokens, times the weight:
  ``out = attn(q, k, v) + weight * attn(q, to_k_ip(tokens), to_v_ip(tokens))`` (diffusers'
  ``IPAdapterAttnProcessor2_0``). The tokens travel in the conditioning (``image_prompts``), so each
  batch row gets its own prompt's (positive: the picture's, negative: the empty one's), as ComfyUI
  picks them by ``cond_or_uncond``.

The encoder and the adapter are placed by the memory manager: both with the text encoders for
the encoding, the adapter with the UNet for sampling.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from core.detect.catalog import family_title
from core.errors import ModelMismatchError
from core.faces.analysis import Face
from core.generate.ip_embeds import combine, concat_pictures, scaled_kv
from core.generate.ip_faceid import face_tokens
from core.generate.ip_weights import BlockWeights, token_mask, transformer_numbers
from core.generate.passes import Contribution, Plan, Run
from core.generate.pictures import unit_pixels
from core.generate.request import ImageSettings
from core.loading.image_encoder import LoadedImageEncoder
from core.loading.ip_adapter import LoadedIpAdapter
from core.models.patches import AttentionCall, ExtraAttention, NetworkPatches, Site
from core.sampling.patches import Apply, ModelCall, ModelPatches

#: the size of the picture ComfyUI_IPAdapter_plus encodes for a plus adapter's negative
EMPTY_SIZE = 224


@dataclass(frozen=True)
class AppliedIpAdapter:
    """One image prompt for one generation: the loaded adapter and encoder, the picture as read
    ((H, W, 3) uint8), its weight and its sigma range (``from``, ``to``), its weight type
    (:data:`core.generate.ip_weights.WEIGHT_TYPES`) and its attention mask ((H, W) in [0, 1], any
    size: where on the picture the image prompt acts; None: everywhere); for the style and
    composition types a second picture read at the composition block (``composition``, SDXL) and
    the composition blocks' weight; the precise types' ``boost``; the "Mad Scientist" layer weights
    (:class:`core.generate.ip_weights.BlockWeights`); the embeds scaling (:data:`EMBEDS_SCALINGS`),
    more pictures read with the first and combined as ``combine`` says (:data:`COMBINE_MODES`), and
    the negative picture (the pack's ``image_negative``; None: a black one for plus, zero
    embeddings for base); for FaceID the face read from the picture and Plus v2's shortcut scale."""

    adapter: LoadedIpAdapter
    encoder: LoadedImageEncoder | None  # None: a FaceID adapter that reads no CLIP vision
    picture: np.ndarray
    weight: float
    sigma_range: tuple[float, float]
    weight_type: str = "linear"
    mask: Tensor | None = None
    composition: np.ndarray | None = None
    composition_weight: float | None = None
    boost: float | None = None
    layer_weights: tuple[tuple[int, float], ...] = ()
    scaling: str = "V only"
    pictures: tuple[np.ndarray, ...] = ()
    combine: str = "concat"
    negative: np.ndarray | None = None
    face: Face | None = None  # FaceID: the face read from the picture
    face_scale: float = 1.0  # FaceID Plus v2: the shortcut's scale (the pack's weight_faceidv2)

    @property
    def count(self) -> int:
        """How many pictures the adapter reads (``picture`` and ``pictures``)."""
        return 1 + len(self.pictures)

    @property
    def blocks(self) -> BlockWeights:
        return BlockWeights(
            self.weight_type, self.weight, self.composition_weight, self.boost, self.layer_weights,
            self.composition is not None,
        )  # fmt: skip

    def acts_at(self, sigma: float) -> bool:
        first, last = self.sigma_range
        return not (sigma > first or sigma < last)


def check_family(adapter: LoadedIpAdapter, family: str) -> None:
    """Refuse, in words, an adapter made for another family."""
    if adapter.family != family:
        raise ModelMismatchError(
            f"{adapter.path.name} is an IP-Adapter for {family_title(adapter.family)}, "
            f"and the model is {family_title(family)}",
            why="its keys and values are made for the cross-attention of the UNet it was trained beside",
            fix=f"Use an IP-Adapter made for {family_title(family)}",
            code="wrong_ip_adapter",
        )


def check_encoder(adapter: LoadedIpAdapter, encoder: LoadedImageEncoder | None) -> None:
    """Refuse, in words, an image encoder of another vision tower than the adapter reads."""
    if encoder is not None and adapter.encoder is not None and encoder.family != adapter.encoder:
        raise ModelMismatchError(
            f"{adapter.path.name} reads pictures with {family_title(adapter.encoder)}, and "
            f"{encoder.path.name} is {family_title(encoder.family)}",
            why="its image projection takes that vision tower's output",
            fix=f"Give the {family_title(adapter.encoder)} image encoder (ComfyUI's models/clip_vision)",
            code="wrong_ip_adapter",
        )


def _embeds(applied: AppliedIpAdapter, pixels: Tensor, device: torch.device, dtype: torch.dtype) -> Tensor:
    enc = applied.encoder
    assert enc is not None
    out = enc.arch.encode(enc.module, pixels, device, dtype)
    return out.penultimate if applied.adapter.embeds == "penultimate" else out.image_embeds


def _conditions(applied: AppliedIpAdapter, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """The tower's output for the pictures (combined as ``applied.combine`` says) and for the
    negative: the negative picture's, else a black picture's (plus) or zeros (base); as many rows
    as the pictures for ``concat``, else one."""
    rows = [_embeds(applied, unit_pixels(p), device, dtype) for p in (applied.picture, *applied.pictures)]
    cond = combine(torch.cat(rows), applied.combine)
    plus = applied.adapter.embeds == "penultimate"
    if applied.negative is not None:
        uncond = _embeds(applied, unit_pixels(applied.negative), device, dtype)
    elif plus:
        uncond = _embeds(applied, torch.zeros(1, 3, EMPTY_SIZE, EMPTY_SIZE), device, dtype)
    else:
        uncond = torch.zeros_like(cond[:1])
    return cond, uncond.expand(cond.shape[0], *uncond.shape[1:])


def _roles(applied: AppliedIpAdapter, pos: Tensor, neg: Tensor, comp: Tensor) -> tuple[Tensor, Tensor]:
    """The token sets of MAIN, SWAPPED and COMPOSITION side by side when the weight type reads more
    than the picture's (ip_weights)."""
    if applied.blocks.roles > 1:
        return torch.cat([pos, pos * 0, comp], 1), torch.cat([neg, pos, neg], 1)
    return pos, neg


@dataclass(frozen=True)
class EncodeImagePrompts:
    """Before the prompts: each picture encoded and projected, and the negative's tokens."""

    adapters: tuple[AppliedIpAdapter, ...]

    def __call__(self, run: Run) -> None:
        run.hooks.place("text_encode")
        compute = run.pipeline.compute
        positive, negative = [], []
        with torch.inference_mode():
            for applied in self.adapters:
                run.hooks.check()
                if applied.face is not None:
                    pos, neg = face_tokens(
                        applied.adapter, applied.encoder, applied.picture, applied.face, applied.face_scale,
                        compute.device, compute.text_dtype, compute.diffusion_dtype,
                    )  # fmt: skip
                    pos, neg = _roles(applied, pos, neg, pos)
                    positive.append(pos)
                    negative.append(neg)
                    continue
                cond, uncond = _conditions(applied, compute.device, compute.text_dtype)
                arch, module = applied.adapter.arch, applied.adapter.module
                dt = compute.diffusion_dtype
                pos = concat_pictures(arch.project(module, cond.to(dt)).float().cpu())
                neg = concat_pictures(arch.project(module, uncond.to(dt)).float().cpu())
                comp = pos
                if applied.blocks.roles > 1 and applied.composition is not None:
                    pixels = unit_pixels(applied.composition)
                    embeds = _embeds(applied, pixels, compute.device, compute.text_dtype)
                    comp = arch.project(module, embeds.to(dt)).float().cpu()
                pos, neg = _roles(applied, pos, neg, comp)
                positive.append(pos)
                negative.append(neg)
        run.image_prompts = replace(run.image_prompts, positive=tuple(positive), negative=tuple(negative))


@dataclass(frozen=True)
class _Layer:
    """One adapter's part of one call: its tokens for the batch, the sites it patches (the
    adapter's key/value pair of each) and each site's transformer number (the weight types')."""

    applied: AppliedIpAdapter
    tokens: Tensor
    order: dict[tuple[Site, int], int]
    numbers: dict[Site, int] = field(default_factory=dict)

    def weight(
        self, site: Site, latent: tuple[int, int], queries: int, like: Tensor
    ) -> tuple[float, Tensor | None, Tensor]:
        """The weight at ``site`` (its weight type's), the mask resized to the call's tokens
        ((1, queries, 1); None: unmasked) and the image tokens that transformer reads."""
        a = self.applied
        n = a.adapter.arch.transformers(a.adapter.module)
        blocks = a.blocks
        w, role = blocks.at(self.numbers.get(site, 0), site.stage, n)
        roles = blocks.roles
        count = self.tokens.shape[1] // roles
        tokens = self.tokens[:, role * count : (role + 1) * count] if roles > 1 else self.tokens
        if a.mask is None or w == 0:
            return w, None, tokens
        return w, token_mask(a.mask, latent, queries).to(like)[None, :, None], tokens


@dataclass(frozen=True)
class IpAttention:
    """The attention patch: each cross-attention gets the active adapters' extra attentions;
    ``latent`` (height, width) is the network input's, which an attention mask is fitted to."""

    layers: tuple[_Layer, ...]
    latent: tuple[int, int] = (0, 0)

    def __call__(self, call: AttentionCall) -> AttentionCall:
        if call.kind != "cross":
            return call
        extra = []
        for layer in self.layers:
            i = layer.order.get((call.site, call.layer))
            if i is None:
                continue
            w, mask, tokens = layer.weight(call.site, self.latent, call.q.shape[1], call.q)
            if w == 0:
                continue  # the pack's ``return 0``: the weight type leaves this transformer out
            a = layer.applied
            k, v = a.adapter.arch.key_value(a.adapter.module, i, tokens.to(call.q.dtype))
            per_picture = tokens.shape[1] // (a.count if a.combine == "concat" else 1)
            k, v, factor = scaled_kv(k, v, w, a.scaling, per_picture)
            extra.append(ExtraAttention(k, v, factor if mask is None else mask * factor))
        return replace(call, extra=call.extra + tuple(extra)) if extra else call


@dataclass(frozen=True)
class IpAdapterStack:
    """Every image prompt of one generation, as a model wrapper: a network call whose sigma is in
    an adapter's range gets that adapter's attention patch."""

    adapters: tuple[AppliedIpAdapter, ...]
    orders: tuple[dict[tuple[Site, int], int], ...]

    def __call__(self, call: ModelCall, apply: Apply) -> Tensor:
        at = float(call.sigma.reshape(-1)[0])
        tokens = call.cond.image_prompts
        layers = tuple(
            _Layer(a, tokens[i], self.orders[i], transformer_numbers(tuple(self.orders[i])))
            for i, a in enumerate(self.adapters)
            if i < len(tokens) and a.weight != 0 and a.acts_at(at)
        )
        if not layers:
            return apply(call)
        latent = (int(call.x.shape[-2]), int(call.x.shape[-1]))
        return apply(call.with_patches(NetworkPatches(attention=(IpAttention(layers, latent),))))


def _order(applied: AppliedIpAdapter, network: torch.nn.Module) -> dict[tuple[Site, int], int]:
    adapter = applied.adapter
    sites = adapter.arch.sites(network)
    if len(sites) != adapter.arch.layers(adapter.module):
        raise ModelMismatchError(
            f"{adapter.path.name} does not fit this diffusion model",
            why=f"it has {adapter.arch.layers(adapter.module)} cross-attention layers, and the "
            f"model's UNet has {len(sites)}",
            fix=f"Use an IP-Adapter made for {family_title(adapter.family)} checkpoints of this size",
            code="wrong_ip_adapter",
        )
    return {site: i for i, site in enumerate(sites)}


@dataclass
class IpAdapterPass:
    """The image prompts of a generation: encoded before the prompts, their tokens in every base
    sampler's conditioning, their attention patch on every stage the base model samples (not the
    refiner's)."""

    adapters: tuple[AppliedIpAdapter, ...]
    kind: str = "image_prompts"
    contribution: Contribution = field(default_factory=Contribution)

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        if not self.adapters:
            return
        plan.pipeline.adapter.patch_points.require(
            "this IP-Adapter", "wrong_ip_adapter", attention=("cross",),
            fix="IP-Adapters apply to SD1.5 and SDXL models",
        )  # fmt: skip
        network = plan.pipeline.nets.diffusion
        orders = tuple(_order(a, network) for a in self.adapters)
        for a in self.adapters:
            a.blocks.check(a.adapter.arch.transformers(a.adapter.module), a.adapter.path.name)
        plan.prepare.append(EncodeImagePrompts(self.adapters))
        plan.patches += ModelPatches(wrappers=(IpAdapterStack(self.adapters, orders),))


__all__ = ["AppliedIpAdapter", "IpAdapterPass", "IpAdapterStack", "check_encoder", "check_family"]
