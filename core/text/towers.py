"""A convention's :class:`~core.archs.protocols.TowerSpec` -> a runnable text tower, by the tower's
kind (``options.kind``): CLIP, T5 and decoder LLMs (``core.text.llm``, which encode the whole
prompt themselves: template, weights, mask); a new encoder kind adds its runner to
:data:`TOWER_KINDS`. No family is named here: the convention says which towers and how."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import torch
from torch import nn

from core.archs.protocols import ClipTowerSpec, T5TowerSpec, TowerSpec
from core.errors import LoadoutError, ModelMismatchError
from core.models.clip import CLIPTextModel
from core.models.llm import LlmTextModel
from core.models.t5 import T5Encoder
from core.text.chunking import ChunkSpec
from core.text.clip_tokenizer import ClipTokenizer
from core.text.embeddings import NO_EMBEDDINGS, EmbeddingFolders, TowerEmbeddings, tower_key
from core.text.encode import ClipLayer, ClipTower, T5Tower, TextTower
from core.text.llm.encode import LlmTower
from core.text.llm.families import LlmTowerSpec
from core.text.llm.tokenizers import LlmTokenizer, tokenizer_for
from core.text.t5_tokenizer import T5Tokenizer


@dataclass
class TowerContext:
    """What building a tower may need besides its module: the convention's id (for messages), the
    tokenizers (the CLIP one is made on first use), CLIP-skip, the compute dtype and device."""

    convention: str
    clip_tokenizer: ClipTokenizer | None
    t5_tokenizer: T5Tokenizer | None
    clip_skip: int | None
    compute_dtype: torch.dtype
    device: torch.device | None
    #: decoder-LLM tokenizers by encoder family id, for those that travel in the encoder's file
    #: (Gemma's SentencePiece; ``core.text.llm.tokenizer_for``); Qwen's comes from its package
    llm_tokenizers: Mapping[str, LlmTokenizer] = field(default_factory=dict)
    #: the files the text encoders were loaded from, by encoder family id: where a decoder LLM's
    #: tokenizer is read when none was given (Gemma's spiece_model, Tekken, tokenizer.json beside)
    encoder_files: Mapping[str, Path] = field(default_factory=dict)
    #: where ``embedding:NAME`` and bare names are found (none: every name is left out)
    embeddings: EmbeddingFolders = NO_EMBEDDINGS

    def clip_tok(self) -> ClipTokenizer:
        if self.clip_tokenizer is None:
            self.clip_tokenizer = ClipTokenizer()
        return self.clip_tokenizer


def _wrong_module(spec: TowerSpec, module: nn.Module) -> ModelMismatchError:
    return ModelMismatchError(
        f"the {spec.title} text encoder loaded is a {type(module).__name__}",
        why=f"a {spec.options.kind} tower is needed",
        fix=f"Load the {spec.title} text encoder the model was made with",
        code="wrong_kind",
    )


def _clip(spec: TowerSpec, module: nn.Module, ctx: TowerContext) -> TextTower:
    opts = spec.options
    if not isinstance(module, CLIPTextModel) or not isinstance(opts, ClipTowerSpec):
        raise _wrong_module(spec, module)
    layer = ClipLayer(opts.layer, opts.norm_hidden, opts.projected_pooled)
    if ctx.clip_skip is not None:
        layer = ClipLayer(ctx.clip_skip, layer.norm_hidden, layer.projected_pooled)
    chunks = ChunkSpec.clip(pad_with_end=opts.pad_with_end)
    found = TowerEmbeddings(ctx.embeddings, tower_key(spec.encoder), module.config.hidden_size)
    return ClipTower(
        module, ctx.clip_tok().encode, chunks, layer, ctx.compute_dtype, ctx.device, found, spec.title
    )


def _t5(spec: TowerSpec, module: nn.Module, ctx: TowerContext) -> TextTower:
    opts = spec.options
    if not isinstance(module, T5Encoder) or not isinstance(opts, T5TowerSpec):
        raise _wrong_module(spec, module)
    if ctx.t5_tokenizer is None:
        raise LoadoutError(
            f"A {ctx.convention} prompt needs a T5 tokenizer, and none was given",
            why="Loadout ships no T5 vocabulary; it uses one found on this computer",
            fix="build the encoder with T5Tokenizer.find(...) (it says where it looked)",
            code="tokenizer_missing",
        )
    chunks = ChunkSpec.t5(min_length=opts.min_length)
    found = TowerEmbeddings(ctx.embeddings, tower_key(spec.encoder), None)
    return T5Tower(
        module, ctx.t5_tokenizer.encode, chunks, ctx.compute_dtype, opts.empty_is_padding, ctx.device,
        found, spec.title,
    )  # fmt: skip


def _llm(spec: TowerSpec, module: nn.Module, ctx: TowerContext) -> LlmTower:
    opts = spec.options
    if not isinstance(module, LlmTextModel) or not isinstance(opts, LlmTowerSpec):
        raise _wrong_module(spec, module)
    tokenizer = next(
        (ctx.llm_tokenizers[e] for e in (spec.encoder, *spec.also) if e in ctx.llm_tokenizers), None
    )
    if tokenizer is None:  # from the encoder's own file (Qwen's: the package vocabulary)
        path = next(
            (ctx.encoder_files[e] for e in (spec.encoder, *spec.also) if e in ctx.encoder_files), None
        )
        tokenizer = tokenizer_for(opts, path)
    return LlmTower(module, tokenizer, opts, ctx.compute_dtype, ctx.device)


TowerBuilder = Callable[[TowerSpec, nn.Module, TowerContext], TextTower | LlmTower]
#: tower kind (``TowerSpec.options.kind``) -> how to build it
TOWER_KINDS: Mapping[str, TowerBuilder] = MappingProxyType({"clip": _clip, "t5": _t5, "llm": _llm})


def build_tower(spec: TowerSpec, module: nn.Module, ctx: TowerContext) -> TextTower | LlmTower:
    builder = TOWER_KINDS.get(spec.options.kind)
    if builder is None:
        raise ModelMismatchError(
            f"Loadout cannot run a {spec.options.kind} text tower yet",
            why=f"the {ctx.convention} prompt encoding needs one for {spec.title}",
            fix="Use a model whose text encoders Loadout runs (CLIP, T5)",
            code="unsupported_family",
        )
    return builder(spec, module, ctx)
