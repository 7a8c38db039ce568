"""Prompt -> conditioning for each family, as ComfyUI's CLIPTextEncode builds it.

Per family (ComfyUI ``sd1_clip``, ``sd2_clip``, ``sdxl_clip``, ``text_encoders/sd3_clip``,
``text_encoders/flux``, ``text_encoders/pixart_t5``; see docs/text.md):

=============  ============================================================  =====================
family         context                                                       pooled
=============  ============================================================  =====================
sd1            CLIP-L last layer, final-normed (768)                         CLIP-L, unprojected
sd2            OpenCLIP-H penultimate, final-normed (1024)                   CLIP-H, projected
sdxl           CLIP-L penultimate ++ CLIP-G penultimate, both un-normed      CLIP-G, projected
               (768 + 1280 = 2048 channels)
sdxl_refiner   CLIP-G penultimate, un-normed (1280)                          CLIP-G, projected
sd3            [CLIP-L ++ CLIP-G penultimate, zero-padded to 4096 channels]  CLIP-L ++ CLIP-G
               then T5 (min 77 tokens) along tokens                          (zeros for a missing one)
flux           T5 (min 256 tokens, no windows)                               CLIP-L last, unprojected
pixart_t5      T5 (no minimum; weights against an all-padding window)        none
=============  ============================================================  =====================

``pixart_t5`` is ComfyUI's PixArt T5 encoding (``text_encoders/pixart_t5``); the PixArt and Chroma
records both name it (ComfyUI's Chroma borrows PixArt's tokenizer).

SDXL's extra vector (``adm``/``y``) is :func:`sdxl_adm`; Flux's guidance is a sampler-side number
carried in :attr:`PromptConditioning.guidance` (ComfyUI's default 3.5 when no FluxGuidance node sets
it). The generation pipeline turns a :class:`PromptConditioning` into the network's batched
:class:`core.sampling.Conditioning` in one place (``Pipeline._to_sampling``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, TypeVar

import torch
import torch.nn.functional as F

from core.errors import LoadoutError, ModelMismatchError
from core.models.attention import timestep_embedding
from core.models.clip import CLIPTextModel
from core.models.t5 import T5Encoder
from core.text.chunking import ChunkSpec
from core.text.clip_tokenizer import ClipTokenizer
from core.text.encode import ClipLayer, ClipTower, T5Tower, TextTower, encode_weighted, tokenize
from core.text.t5_tokenizer import T5Tokenizer

TextFamily = Literal["sd1", "sd2", "sdxl", "sdxl_refiner", "sd3", "flux", "pixart_t5"]
FAMILIES: Final[tuple[TextFamily, ...]] = ("sd1", "sd2", "sdxl", "sdxl_refiner", "sd3", "flux", "pixart_t5")
_T = TypeVar("_T")
FLUX_DEFAULT_GUIDANCE: Final = 3.5
SD3_CONTEXT_WIDTH: Final = 4096
SD3_T5_MIN_LENGTH: Final = 77
FLUX_T5_MIN_LENGTH: Final = 256
#: SDXL's size/crop embeddings: each number as a 256-wide sinusoidal (cos, sin) timestep embedding
SDXL_EMBED_DIM: Final = 256


@dataclass(frozen=True)
class PromptConditioning:
    """What the text encoders made of one prompt (float32, on the CPU): the cached encoder result,
    not yet the network's input (that is :class:`core.sampling.Conditioning`).

    ``context``: (1, tokens, width) cross-attention input. ``pooled``: (1, P) or None.
    ``guidance``: Flux's distilled guidance (None for other families). ``missing_embeddings``:
    ``embedding:NAME`` references that were left out (textual inversion is not supported yet).
    """

    context: torch.Tensor
    pooled: torch.Tensor | None
    guidance: float | None = None
    missing_embeddings: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class TextEncoders:
    """The loaded text towers of a model (whichever its family uses)."""

    clip_l: CLIPTextModel | None = None
    clip_h: CLIPTextModel | None = None
    clip_g: CLIPTextModel | None = None
    t5: T5Encoder | None = None


@dataclass(frozen=True)
class EncodeOptions:
    """``clip_skip``: ComfyUI's CLIPSetLastLayer value (-1 last, -2 penultimate, ...) applied to every
    CLIP tower; None keeps the family's default layer. ``compute_dtype``: float32 like ComfyUI."""

    clip_skip: int | None = None
    compute_dtype: torch.dtype = torch.float32
    #: the device the towers compute on (where the memory manager placed them); None: their weights'
    device: torch.device | None = None

    def __post_init__(self) -> None:
        if self.clip_skip is not None and self.clip_skip >= 0:
            raise ValueError(f"clip_skip counts from the end (-1, -2, ...), not {self.clip_skip}")


def _missing(family: str, part: str) -> ModelMismatchError:
    return ModelMismatchError(
        f"A {family} prompt needs a {part} text encoder, and none is loaded",
        why=f"{family} conditioning is built from {part}",
        fix=f"load a checkpoint that contains {part}, or add the {part} file as a text encoder",
    )


class PromptEncoder:
    """Encodes prompts for one family with the towers given. Build once per loaded model."""

    def __init__(
        self,
        family: TextFamily,
        encoders: TextEncoders,
        *,
        clip_tokenizer: ClipTokenizer | None = None,
        t5_tokenizer: T5Tokenizer | None = None,
        options: EncodeOptions | None = None,
    ) -> None:
        if family not in FAMILIES:
            raise ValueError(f"unknown text family {family!r}; use one of {FAMILIES}")
        self.family: TextFamily = family
        self.options = options or EncodeOptions()
        self._clip_tok = clip_tokenizer
        self._t5_tok = t5_tokenizer
        self.towers = self._build(encoders)

    # -- towers ---------------------------------------------------------------------------------
    def _clip_tokenizer(self) -> ClipTokenizer:
        if self._clip_tok is None:
            self._clip_tok = ClipTokenizer()
        return self._clip_tok

    def _clip(self, model: CLIPTextModel, *, pad_with_end: bool, layer: ClipLayer) -> ClipTower:
        if self.options.clip_skip is not None:
            layer = ClipLayer(self.options.clip_skip, layer.norm_hidden, layer.projected_pooled)
        return ClipTower(
            model, self._clip_tokenizer().encode, ChunkSpec.clip(pad_with_end=pad_with_end), layer,
            self.options.compute_dtype, self.options.device,
        )  # fmt: skip

    def _t5(self, model: T5Encoder, min_length: int, *, empty_is_padding: bool = False) -> T5Tower:
        if self._t5_tok is None:
            raise LoadoutError(
                f"A {self.family} prompt needs a T5 tokenizer, and none was given",
                why="Loadout ships no T5 vocabulary; it uses one found on this computer",
                fix="build the encoder with T5Tokenizer.find(...) (it says where it looked)",
                code="tokenizer_missing",
            )
        return T5Tower(
            model, self._t5_tok.encode, ChunkSpec.t5(min_length=min_length), self.options.compute_dtype,
            empty_is_padding, self.options.device,
        )  # fmt: skip

    def _build(self, e: TextEncoders) -> dict[str, TextTower]:
        f = self.family
        towers: dict[str, TextTower] = {}
        penultimate = ClipLayer(-2, norm_hidden=False)
        if f == "sd1":
            towers["l"] = self._clip(_need(e.clip_l, f, "CLIP-L"), pad_with_end=True, layer=ClipLayer())
        elif f == "sd2":
            h = _need(e.clip_h, f, "OpenCLIP-H")
            towers["h"] = self._clip(h, pad_with_end=False, layer=ClipLayer(-2, True, projected_pooled=True))
        elif f in ("sdxl", "sdxl_refiner", "sd3"):
            if f == "sdxl":
                towers["l"] = self._clip(_need(e.clip_l, f, "CLIP-L"), pad_with_end=True, layer=penultimate)
            elif f == "sd3" and e.clip_l is not None:
                towers["l"] = self._clip(e.clip_l, pad_with_end=True, layer=penultimate)
            if f != "sd3" or e.clip_g is not None:
                g = _need(e.clip_g, f, "CLIP-G")
                g_layer = ClipLayer(-2, norm_hidden=False, projected_pooled=True)
                towers["g"] = self._clip(g, pad_with_end=False, layer=g_layer)
            if f == "sd3" and e.t5 is not None:
                towers["t5"] = self._t5(e.t5, SD3_T5_MIN_LENGTH)
        elif f == "flux":
            towers["l"] = self._clip(_need(e.clip_l, f, "CLIP-L"), pad_with_end=True, layer=ClipLayer())
            towers["t5"] = self._t5(_need(e.t5, f, "T5-XXL"), FLUX_T5_MIN_LENGTH)
        else:  # pixart_t5
            towers["t5"] = self._t5(_need(e.t5, f, "T5-XXL"), 1, empty_is_padding=True)
        return towers

    # -- encoding -------------------------------------------------------------------------------
    def encode(self, prompt: str) -> PromptConditioning:
        outputs: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
        missing: dict[str, None] = {}
        for name, tower in self.towers.items():
            tokens = tokenize(tower, prompt)
            missing.update(dict.fromkeys(tokens.missing_embeddings))
            outputs[name] = encode_weighted(tower, tokens)
        context, pooled = _combine(self.family, outputs)
        guidance = FLUX_DEFAULT_GUIDANCE if self.family == "flux" else None
        return PromptConditioning(context, pooled, guidance, tuple(missing))


def _need(model: _T | None, family: str, part: str) -> _T:
    if model is None:
        raise _missing(family, part)
    return model


def _cat_channels(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    cut = min(a.shape[1], b.shape[1])
    return torch.cat([a[:, :cut], b[:, :cut]], dim=-1)


def _combine(
    family: TextFamily, out: dict[str, tuple[torch.Tensor, torch.Tensor | None]]
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if family in ("sd1", "sd2", "sdxl_refiner"):
        return next(iter(out.values()))
    if family == "sdxl":
        (l_ctx, _), (g_ctx, g_pooled) = out["l"], out["g"]
        return _cat_channels(l_ctx, g_ctx), g_pooled
    if family == "flux":
        return out["t5"][0], out["l"][1]
    if family == "pixart_t5":
        return out["t5"][0], None
    return _combine_sd3(out)


_Outputs = dict[str, tuple[torch.Tensor, torch.Tensor | None]]


def _combine_sd3(out: _Outputs) -> tuple[torch.Tensor, torch.Tensor]:
    """ComfyUI's SD3ClipModel: a missing CLIP-L or -G gives a zero pooled half (and CLIP-G alone is
    shifted past CLIP-L's 768 channels); no CLIP at all gives only T5; nothing at all gives zeros."""
    lg: torch.Tensor | None = None
    pooled: torch.Tensor | None = None
    if "l" in out or "g" in out:
        l_ctx, l_pooled = out.get("l", (None, torch.zeros(1, 768)))
        g_ctx, g_pooled = out.get("g", (None, torch.zeros(1, 1280)))
        if l_ctx is not None and g_ctx is not None:
            lg = _cat_channels(l_ctx, g_ctx)
        elif g_ctx is not None:
            lg = F.pad(g_ctx, (768, 0))
        else:
            lg = l_ctx
        assert lg is not None and l_pooled is not None and g_pooled is not None
        lg = F.pad(lg, (0, SD3_CONTEXT_WIDTH - lg.shape[-1]))
        pooled = torch.cat([l_pooled, g_pooled], dim=-1)
    context = lg
    if "t5" in out:
        t5 = out["t5"][0]
        context = t5 if lg is None else torch.cat([lg, t5], dim=-2)
    if context is None:
        context = torch.zeros(1, 77, SD3_CONTEXT_WIDTH)
    return context, torch.zeros(1, 768 + 1280) if pooled is None else pooled


def sdxl_adm(
    pooled: torch.Tensor,
    *,
    width: int,
    height: int,
    crop_w: int = 0,
    crop_h: int = 0,
    target_width: int | None = None,
    target_height: int | None = None,
) -> torch.Tensor:
    """SDXL's (B, 2816) class vector: CLIP-G pooled ++ embeddings of height, width, crop_h, crop_w,
    target_height, target_width. ComfyUI's defaults: width/height = the image size (latent x 8),
    crops 0, targets = width/height."""
    sizes = [height, width, crop_h, crop_w, target_height or height, target_width or width]
    flat = timestep_embedding(torch.tensor(sizes, dtype=torch.float32), SDXL_EMBED_DIM).flatten()[None]
    return torch.cat([pooled.float(), flat.to(pooled.device).repeat(pooled.shape[0], 1)], dim=1)


def sdxl_refiner_adm(
    pooled: torch.Tensor,
    *,
    width: int,
    height: int,
    crop_w: int = 0,
    crop_h: int = 0,
    negative: bool = False,
    aesthetic_score: float | None = None,
) -> torch.Tensor:
    """The refiner's (B, 2560) vector: pooled ++ height, width, crop_h, crop_w, aesthetic score
    (ComfyUI's defaults: 6 for the positive prompt, 2.5 for the negative)."""
    score = aesthetic_score if aesthetic_score is not None else (2.5 if negative else 6.0)
    sizes = [height, width, crop_h, crop_w, score]
    flat = timestep_embedding(torch.tensor(sizes, dtype=torch.float32), SDXL_EMBED_DIM)
    flat = flat.flatten()[None].to(pooled.device)
    return torch.cat([pooled.float(), flat.repeat(pooled.shape[0], 1)], dim=1)
