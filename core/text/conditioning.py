"""Prompt -> conditioning, as ComfyUI's CLIPTextEncode builds it, for any
:class:`~core.archs.protocols.TextConvention`.

The convention (an architecture package's: ``core/archs/unet/text.py`` for SD1/SD2/SDXL/refiner,
``core/archs/mmdit/text.py`` for SD3, ``core/archs/flux/text.py``, ``core/archs/t5_text/text.py``;
docs/text.md has the table) says which encoder towers a prompt goes through and how their outputs
combine; this module runs the towers (weights, windows, CLIP-skip) and caches nothing. The
generation pipeline turns a :class:`PromptConditioning` into the network's batched
:class:`core.sampling.Conditioning` through the convention's ``network_inputs``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
from torch import nn

from core.archs.catalog import TEXTS, find_in_packages
from core.archs.protocols import TextConvention, TowerOutput, TowerSpec
from core.archs.references import NO_PICTURES, PromptPictures
from core.errors import ModelMismatchError
from core.text.clip_tokenizer import ClipTokenizer
from core.text.embeddings import NO_EMBEDDINGS, EmbeddingFolders
from core.text.encode import TextTower, encode_weighted, tokenize
from core.text.llm.encode import LlmTower
from core.text.llm.tokenizers import LlmTokenizer
from core.text.t5_tokenizer import T5Tokenizer
from core.text.towers import TowerContext, build_tower

#: the ids of the prompt encodings (``DiffusionSpec.text``)
FAMILIES: tuple[str, ...] = TEXTS.ids()
TextFamily = str

__all__ = [
    "FAMILIES", "EncodeOptions", "PromptConditioning", "PromptEncoder", "TextEncoders", "TextFamily",
    "text_encoders",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    """A convention's constants and helpers (``SDXL_EMBED_DIM``, ``sdxl_adm``, ...) by the import
    path older callers use: looked up in the packages' ``text`` modules, where they live."""
    return find_in_packages("text", name)


@dataclass(frozen=True)
class PromptConditioning:
    """What the text encoders made of one prompt (float32, on the CPU): the cached encoder result,
    not yet the network's input (that is :class:`core.sampling.Conditioning`).

    ``context``: (1, tokens, width) cross-attention input. ``pooled``: (1, P) or None.
    ``guidance``: the convention's distilled guidance (Flux's 3.5; None for others).
    ``missing_embeddings``: ``embedding:NAME`` references no embedding file has (left out).
    ``mask``: (1, tokens) text mask, or None (CLIP and T5 conventions). ``embeddings``: the
    embedding files the prompt used, (name as written, file). ``notes``: embeddings a tower left
    out (made for another text encoder's width).
    """

    context: torch.Tensor
    pooled: torch.Tensor | None
    guidance: float | None = None
    missing_embeddings: tuple[str, ...] = field(default=())
    mask: torch.Tensor | None = None
    embeddings: tuple[tuple[str, str], ...] = field(default=())
    notes: tuple[str, ...] = field(default=())


class TextEncoders:
    """The loaded text encoders of a model, by encoder family id (``clip-l``, ``t5-xxl`` ...). The
    keywords name the four CLIP/T5 towers the older callers pass."""

    def __init__(
        self,
        modules: Mapping[str, nn.Module] | None = None,
        *,
        clip_l: nn.Module | None = None,
        clip_h: nn.Module | None = None,
        clip_g: nn.Module | None = None,
        t5: nn.Module | None = None,
    ) -> None:
        found = dict(modules or {})
        named = {"clip-l": clip_l, "clip-h": clip_h, "clip-g": clip_g, "t5-xxl": t5}
        found |= {k: m for k, m in named.items() if m is not None}
        self.modules: Mapping[str, nn.Module] = MappingProxyType(found)

    def find(self, tower: TowerSpec) -> nn.Module | None:
        """The module for ``tower``: its encoder family's, or one that may stand in for it."""
        for encoder in (tower.encoder, *tower.also):
            if encoder in self.modules:
                return self.modules[encoder]
        return None


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


def _missing(convention: str, part: str) -> ModelMismatchError:
    return ModelMismatchError(
        f"A {convention} prompt needs a {part} text encoder, and none is loaded",
        why=f"{convention} conditioning is built from {part}",
        fix=f"load a checkpoint that contains {part}, or add the {part} file as a text encoder",
    )


class PromptEncoder:
    """Encodes prompts for one convention with the towers given. Build once per loaded model."""

    def __init__(
        self,
        family: str,
        encoders: TextEncoders,
        *,
        clip_tokenizer: ClipTokenizer | None = None,
        t5_tokenizer: T5Tokenizer | None = None,
        options: EncodeOptions | None = None,
        llm_tokenizers: Mapping[str, LlmTokenizer] | None = None,
        encoder_files: Mapping[str, Path] | None = None,
        embeddings: EmbeddingFolders = NO_EMBEDDINGS,
    ) -> None:
        """``llm_tokenizers``: by encoder family, the decoder-LLM tokenizers read from their files
        (``core.text.llm.tokenizer_for(spec, path)``: Gemma's; Qwen's needs none); else read from
        ``encoder_files`` (by encoder family, the file each encoder was loaded from). ``embeddings``:
        the folders ``embedding:NAME`` and bare names are found in."""
        if family not in TEXTS:
            raise ValueError(f"unknown text family {family!r}; use one of {FAMILIES}")
        self.family = family
        self.convention: TextConvention = TEXTS[family]
        self.options = options or EncodeOptions()
        o = self.options
        ctx = TowerContext(
            family,
            clip_tokenizer,
            t5_tokenizer,
            o.clip_skip,
            o.compute_dtype,
            o.device,
            dict(llm_tokenizers or {}),
            dict(encoder_files or {}),
            embeddings,
        )
        self.towers = self._build(encoders, ctx)

    def _build(self, encoders: TextEncoders, ctx: TowerContext) -> dict[str, TextTower | LlmTower]:
        towers: dict[str, TextTower | LlmTower] = {}
        for spec in self.convention.towers:
            module = encoders.find(spec)
            if module is None:
                if spec.required:
                    raise _missing(self.family, spec.title)
                continue
            towers[spec.name] = build_tower(spec, module, ctx)
        return towers

    def encode(self, prompt: str, pictures: PromptPictures = NO_PICTURES) -> PromptConditioning:
        """``pictures``: an edit's reference pictures, handed to the decoder-LLM towers of a
        convention that reads them (``convention.pictures``); the others never see them."""
        if not self.convention.pictures:
            pictures = NO_PICTURES
        outputs: dict[str, TowerOutput] = {}
        missing: dict[str, None] = {}
        used: dict[tuple[str, str], None] = {}
        notes: dict[str, None] = {}
        for name, tower in self.towers.items():
            if isinstance(tower, LlmTower):  # template, weights and mask are the tower's own
                llm_tokens = tower.tokenize(prompt, pictures)
                missing.update(dict.fromkeys(llm_tokens.missing_embeddings))
                outputs[name] = tower.encode_tokens(llm_tokens, pictures.images)
                continue
            tokens = tokenize(tower, prompt)
            missing.update(dict.fromkeys(tokens.missing_embeddings))
            used.update(dict.fromkeys(tokens.used_embeddings))
            notes.update(dict.fromkeys(tokens.notes))
            hidden, pooled = encode_weighted(tower, tokens)
            outputs[name] = TowerOutput(hidden, pooled)
        text = self.convention.combine(outputs)
        return PromptConditioning(
            text.context, text.pooled, self.convention.guidance, tuple(missing), text.mask, tuple(used),
            tuple(notes),
        )  # fmt: skip


def encoder_ids() -> frozenset[str]:
    """Every encoder family some convention's towers take (what a text-encoder slot may hold)."""
    return frozenset(e for c in TEXTS for t in c.towers for e in (t.encoder, *t.also))


def text_encoders(modules: list[tuple[str, nn.Module]]) -> TextEncoders:
    """(family id, module) pairs of loaded text encoders -> the towers a prompt encoder takes (an
    encoder no prompt encoding takes is refused)."""
    known = encoder_ids()
    for family, _ in modules:
        if family not in known:
            raise ModelMismatchError(
                f"a {family} text encoder cannot condition these models",
                fix="Use the text encoders the model was made with",
                code="wrong_kind",
            )
    return TextEncoders(dict(modules))
