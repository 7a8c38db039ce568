"""IP-Adapter's weight types and attention mask, as ComfyUI_IPAdapter_plus computes them
(``ipadapter_execute`` and ``CrossAttentionPatch.ipadapter_attention``).

**Weight types** scale the adapter's weight per UNet transformer (``SpatialTransformer``), numbered
``t`` in the order the UNet's forward runs them (ComfyUI's ``transformer_index``: the input blocks,
the middle block, then the output blocks; every transformer block of one ``SpatialTransformer``
shares its number) out of ``n`` = 11 for SDXL, 16 for SD1.5:

* ``linear``: the weight everywhere;
* ``ease in`` ``w * (0.05 + 0.95 * (1 - t/n))``; ``ease out`` ``w * (0.05 + 0.95 * t/n)``;
  ``ease in-out`` ``w * (0.05 + 0.95 * (1 - |t - n/2| / (n/2)))``; ``reverse in-out``
  ``w * (0.05 + 0.95 * |t - n/2| / (n/2))``;
* ``weak input`` / ``weak middle`` / ``weak output``: that stage's blocks at ``0.2 w``; ``strong
  middle``: the input and output blocks at ``0.2 w``;
* ``style transfer``, ``composition``, ``strong style transfer``: only the listed transformers
  (the others get no image prompt): SDXL style ``{6}`` (the second output transformer, InstantStyle's
  ``up_blocks.0.attentions.1``), composition ``{3}`` (``down_blocks.2.attentions.1``), strong style
  all but 3; SD1.5 style ``{0-3, 9-15}``, composition ``{4: 0.25 w, 5: w}``, strong style all but
  4 and 5;
* ``style and composition`` / ``strong style and composition``: the style blocks at ``w``, the
  composition blocks at the composition weight ``c`` (SDXL's 3 reads the composition picture when
  one is given: the pack's ``cond_alt``);
* ``style transfer precise`` / ``composition precise``: the same dicts with the boost, and at some
  transformers the picture goes to the negative rows and zeros to the positive ones (the pack's
  ``uncond = cond; cond = cond * 0``): :meth:`BlockWeights.role`;
* layer weights (the pack's "Mad Scientist" ``layer_weights``, ``"3:2.5, 6:1"``): ``f * w`` at the
  listed transformers only, replacing every type but the precise ones.

The pack decides SDXL by the adapter's output width (2048) and ``n`` by whether the adapter has a
101st key/value pair (a whole SDXL adapter has 70); Loadout takes both from the adapter's output
width (the adapter package's ``transformers``: the same for every real file).

**The attention mask** (``attn_mask``: (H, W) in [0, 1], any size) multiplies the adapter's
attention output per query token: for a call with ``L`` tokens on a latent of ``oh x ow``, the
mask is resized (bilinear, ``F.interpolate``) to ``mh x mw`` with ``mh = int(oh / sqrt(oh * ow / L))``
(plus one when ``L`` is not a multiple of it) and ``mw = L // mh``, flattened, and zero-padded
(half before, half after) or centre-cropped to ``L`` tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from core.errors import LoadoutError
from core.models.patches import Site

#: the weight types Loadout computes, in ComfyUI_IPAdapter_plus's order ("strong style and
#: composition" is the pack's IPAdapterStyleComposition with ``expand_style``)
WEIGHT_TYPES = (
    "linear", "ease in", "ease out", "ease in-out", "reverse in-out", "weak input", "weak output",
    "weak middle", "strong middle", "style transfer", "composition", "strong style transfer",
    "style and composition", "strong style and composition", "style transfer precise", "composition precise",
)  # fmt: skip
#: the types with a composition weight, that may take a second picture for the composition blocks
COMPOSITION_TYPES = ("style and composition", "strong style and composition")
#: the types that give the picture to the negative rows at some transformers (``boost``: the pack's
#: ``style_boost`` / ``composition_boost``)
PRECISE_TYPES = ("style transfer precise", "composition precise")
#: which tokens a transformer reads: MAIN (positive rows the picture's, negative rows the empty
#: picture's), SWAPPED (positive rows zeros, negative rows the picture's: the pack's
#: ``uncond = cond; cond = cond * 0``), COMPOSITION (positive rows the composition picture's)
MAIN, SWAPPED, COMPOSITION = 0, 1, 2
ROLES = 3

_SD1_STYLE = (0, 1, 2, 3, 9, 10, 11, 12, 13, 14, 15)
_SDXL = 11  # transformers an SDXL UNet numbers
_SD1 = 16
#: the composition transformers: SDXL's ``down_blocks.2.attentions.1``, SD1.5's ``down_blocks.2``
_SDXL_COMPOSITION, _SD1_COMPOSITION = (3,), (4, 5)
#: the pack's ``cond_alt``: the transformer that reads the composition picture (SDXL only)
_COMPOSITION_PICTURE_AT = 3


def _bad(what: str, why: str, fix: str) -> LoadoutError:
    return LoadoutError(what, why=why, fix=fix, code="bad_argument")


def parse_layer_weights(text: str) -> tuple[tuple[int, float], ...]:
    """The pack's ``layer_weights`` ("3:2.5, 6:1": transformer index, then its factor of the
    weight), as pairs in order (a later repeat of an index wins, as in the pack's dict); empty
    pieces (a trailing comma) are left out. Anything else is refused in words."""
    pairs: list[tuple[int, float]] = []
    for piece in text.split(","):
        if not piece.strip():
            continue
        index, colon, value = piece.partition(":")
        try:
            if not colon or ":" in value:
                raise ValueError(piece)
            pair = (int(index), float(value))
        except ValueError:
            raise _bad(
                f"layer weights {text!r}: {piece.strip()!r} is not INDEX:WEIGHT",
                "layer weights are ComfyUI_IPAdapter_plus's: a transformer index (0-10 SDXL, 0-15 "
                "SD1.5), a colon and its factor, the pairs separated by commas",
                "Give e.g. 3:2.5, 6:1",
            ) from None
        if pair[0] < 0 or not math.isfinite(pair[1]):
            raise _bad(
                f"layer weights {text!r}: {piece.strip()!r} is out of range",
                "the index is a UNet transformer's number from 0 and the factor a finite number",
                "Give e.g. 3:2.5, 6:1",
            )
        pairs.append(pair)
    if not pairs:
        raise _bad(
            f"layer weights {text!r} name no transformer",
            "they are INDEX:WEIGHT pairs",
            "Give e.g. 3:2.5, 6:1",
        )
    return tuple(pairs)


def show_layer_weights(pairs: tuple[tuple[int, float], ...]) -> str:
    """The pairs as the pack writes them, without spaces: ``3:2.5,6:1``."""
    return ",".join(f"{i}:{v:g}" for i, v in pairs)


@dataclass(frozen=True)
class BlockWeights:
    """One image prompt's weight per UNet transformer, as the pack's ``ipadapter_execute`` and
    ``ipadapter_attention`` compute it: the weight type, the weight, the composition blocks'
    weight (``composition``, the pack's ``weight_composition``, default 1), the precise types'
    ``boost`` (``style_boost`` / ``composition_boost``; default: the weight), the ``layers``
    ("Mad Scientist" layer weights: they replace the type unless it is a precise one) and whether
    a composition picture is given (read at transformer 3, the pack's ``cond_alt``)."""

    weight_type: str
    weight: float
    composition: float | None = None
    boost: float | None = None
    layers: tuple[tuple[int, float], ...] = ()
    composition_picture: bool = False

    def table(self, sdxl: bool) -> dict[int, float] | None:
        """The transformers a block-selecting type (or the layer weights) patches and their
        weights; None for the types computed per transformer."""
        w, t = self.weight, self.weight_type
        n = _SDXL if sdxl else _SD1
        wc = 1.0 if self.composition is None else self.composition
        if self.layers:
            return {i: v * w for i, v in self.layers}
        if t == "style transfer":
            return {6: w} if sdxl else dict.fromkeys(_SD1_STYLE, w)
        if t == "composition":
            return {3: w} if sdxl else {4: w * 0.25, 5: w}
        if t == "strong style transfer":
            left_out = _SDXL_COMPOSITION if sdxl else _SD1_COMPOSITION
            return {i: w for i in range(n) if i not in left_out}
        if t == "style transfer precise":
            wc = w if self.boost is None else self.boost
        if t in ("style and composition", "style transfer precise"):
            return {3: wc, 6: w} if sdxl else {**dict.fromkeys(_SD1_STYLE, w), 4: wc * 0.25, 5: wc}
        if t == "strong style and composition":
            composition = _SDXL_COMPOSITION if sdxl else _SD1_COMPOSITION
            return {**dict.fromkeys(range(n), w), **dict.fromkeys(composition, wc)}
        if t == "composition precise":
            other = w if self.boost is None else self.boost
            if sdxl:
                return {**{i: other * 0.1 for i in range(n)}, 3: w, 6: other}
            weak = {i: other * 0.1 for i in (6, 7, 8)}
            return {**dict.fromkeys(_SD1_STYLE, other), **weak, 4: w * 0.25, 5: w}
        return None

    def role(self, index: int, sdxl: bool) -> int:
        """Which tokens transformer ``index`` reads (MAIN, SWAPPED, COMPOSITION)."""
        composition = index in (_SDXL_COMPOSITION if sdxl else _SD1_COMPOSITION)
        if self.weight_type == "style transfer precise" and composition:
            return SWAPPED
        if self.weight_type == "composition precise" and not composition:
            return SWAPPED
        if self.composition_picture and index == _COMPOSITION_PICTURE_AT:
            return COMPOSITION
        return MAIN

    @property
    def roles(self) -> int:
        """How many token sets the conditioning carries for it: 1 (MAIN) or all :data:`ROLES`."""
        return ROLES if self.weight_type in PRECISE_TYPES or self.composition_picture else 1

    def at(self, index: int, stage: str, n: int) -> tuple[float, int]:
        """The weight at the UNet transformer ``index`` (forward order) of ``stage`` (``input``,
        ``middle``, ``output``) out of ``n`` (11: SDXL's numbering, 16: SD1.5's), and which tokens
        it reads; weight 0 where the type leaves that transformer out."""
        sdxl = n == _SDXL
        chosen = self.table(sdxl)
        if chosen is not None:
            return (chosen[index], self.role(index, sdxl)) if index in chosen else (0.0, MAIN)
        return _formula(self.weight_type, self.weight, index, stage, n), MAIN

    def check(self, n: int, name: str) -> None:
        """Refuse, in words, what the adapter ``name`` (``n`` transformers) cannot do: a
        composition picture on SD1.5 (the pack's IPAdapterStyleComposition refuses it), a layer
        weight for a transformer the UNet has not."""
        if self.composition_picture and n != _SDXL:
            raise LoadoutError(
                f"{name} is an SD1.5 IP-Adapter, and a composition picture needs SDXL",
                why="ComfyUI_IPAdapter_plus's style and composition transfer reads a second picture "
                "only on SDXL's composition block",
                fix="Leave out the composition picture (style and composition then reads the one picture), "
                "or use an SDXL model and IP-Adapter",
                code="bad_argument",
            )
        past = [i for i, _ in self.layers if i >= n]
        if past:
            raise _bad(
                f"layer weights name transformer {past[0]}, and {name}'s UNet has {n} (0-{n - 1})",
                "layer weights are indices of the UNet's transformers: 0-10 on SDXL, 0-15 on SD1.5",
                f"Give indices from 0 to {n - 1}",
            )


def _formula(weight_type: str, weight: float, index: int, stage: str, n: int) -> float:
    half = n / 2
    if weight_type == "ease in":
        return weight * (0.05 + 0.95 * (1 - index / n))
    if weight_type == "ease out":
        return weight * (0.05 + 0.95 * (index / n))
    if weight_type == "ease in-out":
        return weight * (0.05 + 0.95 * (1 - abs(index - half) / half))
    if weight_type == "reverse in-out":
        return weight * (0.05 + 0.95 * (abs(index - half) / half))
    weak = {"weak input": ("input",), "weak middle": ("middle",), "weak output": ("output",),
            "strong middle": ("input", "output")}  # fmt: skip
    if weight_type in weak:
        return weight * 0.2 if stage in weak[weight_type] else weight
    return weight


def layer_weight(weight_type: str, weight: float, index: int, stage: str, n: int) -> float:
    """The weight ``weight_type`` gives the UNet transformer ``index`` (see :meth:`BlockWeights.at`)."""
    return BlockWeights(weight_type, weight).at(index, stage, n)[0]


def token_mask(mask: torch.Tensor, latent: tuple[int, int], tokens: int) -> torch.Tensor:
    """The (H, W) mask as one factor per query token of an attention over ``tokens`` tokens on an
    ``oh x ow`` latent: (tokens,)."""
    oh, ow = latent
    mh = int(oh / math.sqrt(oh * ow / tokens))
    mh += int(tokens % mh != 0)
    mw = tokens // mh
    flat = F.interpolate(mask[None, None].float(), size=(mh, mw), mode="bilinear")[0, 0].reshape(-1)
    if mh * mw < tokens:
        pad = tokens - mh * mw
        return F.pad(flat, (pad // 2, pad - pad // 2))
    start = (mh * mw - tokens) // 2
    return flat[start : start + tokens]


def transformer_numbers(sites: tuple[tuple[Site, int], ...]) -> dict[Site, int]:
    """Each site holding a cross-attention numbered as ComfyUI's ``transformer_index``: the input
    blocks, the middle block, then the output blocks, in order."""
    stages = {"input": 0, "middle": 1, "output": 2}
    unique = dict.fromkeys(site for site, _ in sites)
    ordered = sorted(unique, key=lambda s: (stages.get(s.stage, 3), s.index))
    return {site: i for i, site in enumerate(ordered)}


__all__ = [
    "COMPOSITION_TYPES", "PRECISE_TYPES", "WEIGHT_TYPES", "BlockWeights", "layer_weight",
    "parse_layer_weights", "show_layer_weights", "token_mask", "transformer_numbers",
]  # fmt: skip
