"""The decoder-LLM text encoders' file layouts -> the network's keys (``core.models.llm``).

Layouts (the ``layout`` detection gives, ``core.detect.encoder_text.read_llm``):

* ``transformers``: ``model.embed_tokens.weight``, ``model.layers.N....``, ``model.norm.weight`` -
  Hugging Face single files and shards, and Comfy-Org's ``text_encoders/*.safetensors`` repacks
  (``qwen_3_4b.safetensors``, ``gemma_2_2b.safetensors``, ``*_fp8_scaled``): the module's own keys.
* ``transformers-vl``: ``model.language_model.*`` (transformers 4.50+'s Qwen2.5-VL / Gemma-3 files).
* ``bare``: the same without ``model.`` (``layers.N....``, ``embed_tokens.weight``).
* GGUF files are indexed under transformers names (``core.files.gguf_llm``), so they load as
  ``transformers``; llama.cpp stores Gemma's norm weights as ``1 + w``, undone at read.

Qwen2.5-VL's vision tower (``visual.*``, ``model.visual.*``) is the module's ``visual.*``
(``core.models.llm.vision``) when the file has one. Keys a text encoder never uses are dropped by
every conversion: the LM head, other vision towers and projectors (Gemma-3 ``vision_tower.*``),
the SentencePiece model Comfy-Org's Gemma files carry as the uint8 tensor ``spiece_model``
(Mistral's: ``tekken_model``; read by the tokenizer, not the network).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from typing import Final

import torch

from core.archs.layouts import Architecture, Shapes, Tensors
from core.models.llm import LlmConfig, LlmTextModel

#: every encoder family the network loads (``core.detect.encoder_families.LLM_SPECS``' ids)
LLM_FAMILIES: Final = (
    "qwen3-0.6b",
    "qwen3-4b",
    "qwen3-8b",
    "qwen2.5-vl-3b",
    "qwen2.5-vl-7b",
    "gemma2-2b",
    "gemma3-4b",
    "llama3.1-8b",
    "mistral3-24b",
)
#: file keys that belong to no part of the text encoder (dropped, never reported as unexpected)
UNUSED_PREFIXES: Final = (
    "lm_head.",
    "visual.",
    "model.visual.",
    "vision_tower.",
    "model.vision_tower.",
    "multi_modal_projector.",
    "model.multi_modal_projector.",
    "spiece_model",
    "tekken_model",
    "tokenizer.",
)
#: the families whose vision tower is loaded with the language model (Qwen-Image-Edit reads
#: pictures through it): ``visual.*`` (Comfy-Org, Hugging Face) or ``model.visual.*``
#: (transformers 4.50+) become the module's ``visual.*``
VISION_FAMILIES: Final = ("qwen2.5-vl-3b", "qwen2.5-vl-7b")
VISION_PREFIXES: Final = ("visual.", "model.visual.")
_BASES: Final = {"transformers": "model.", "transformers-vl": "model.language_model.", "bare": ""}


class _Renamed(Mapping[str, torch.Tensor]):
    """A lazy view of ``tensors`` under the module's names (each tensor read only when asked)."""

    def __init__(self, tensors: Tensors, layout: str, vision: bool = False) -> None:
        self._src = tensors
        base = _BASES[layout]
        self._names: dict[str, str] = {}
        for key in tensors:
            if vision and key.startswith(VISION_PREFIXES):
                self._names["visual." + key.split("visual.", 1)[1]] = key
                continue
            if key.startswith(UNUSED_PREFIXES):
                continue
            if base and key.startswith(base):
                self._names["model." + key[len(base) :]] = key
            elif not base and not key.startswith("model."):
                self._names["model." + key] = key
            else:
                self._names[key] = key

    def __getitem__(self, key: str) -> torch.Tensor:
        return self._src[self._names[key]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _renamed(tensors: Tensors, family: str, *, layout: str) -> Tensors:
    return _Renamed(tensors, layout, vision=family in VISION_FAMILIES)


def _configure(shapes: Shapes, family: str) -> LlmConfig:
    return LlmConfig.from_shapes(shapes, family)


LLM_ARCHITECTURE: Final = Architecture(
    "llm-text",
    "text_encoder",
    LLM_FAMILIES,
    configure=_configure,
    build=lambda cfg, device, dtype: LlmTextModel(cfg, device=device, dtype=dtype),
    to_module={layout: partial(_renamed, layout=layout) for layout in _BASES},
)
