"""Decoder-LLM text encoders on the prompt side: tokenizers, family templates and layer taps.

Interface (for a family package, e.g. Z-Image / Lumina 2)::

    from core.loading.loader import load_text_encoder
    from core.text.llm import LlmTower, Z_IMAGE_QWEN3, LUMINA2_GEMMA2, Z_IMAGE_TOWER

    enc = load_text_encoder("qwen_3_4b.safetensors")      # LoadedComponent, family "qwen3-4b"
    tower = LlmTower.from_file(enc.module, Z_IMAGE_QWEN3, "qwen_3_4b.safetensors")
    out = tower.encode("a cat")   # TowerOutput: hidden [1, T, 2560] float32 CPU, pooled None,
                                  # mask [1, T] (1 = real token; all ones: no padding)

    enc = load_text_encoder("gemma_2_2b.safetensors")     # its SentencePiece model is inside
    tower = LlmTower.from_file(enc.module, LUMINA2_GEMMA2, "gemma_2_2b.safetensors")
    out = tower.encode("a cat")   # hidden [1, T, 2304]: BOS + system prompt + <Prompt Start> + prompt

``QWEN_IMAGE_QWEN25VL`` (Qwen2.5-VL-7B: the last hidden state, the template's system part dropped:
``LlmTowerSpec.drop``) is Qwen-Image's. ``Z_IMAGE_TOWER`` / ``LUMINA2_TOWER`` / ``QWEN_IMAGE_TOWER``
are the :class:`~core.archs.protocols.TowerSpec` s a
convention names (``options`` is the :class:`LlmTowerSpec`: template, layer -2, weights, start/pad,
tokenizer). ``LlmTower(model, tokenizer, spec, compute_dtype=torch.float32, device=...)`` builds one
on a placed model; a convention's ``PromptEncoder`` builds it from the TowerSpec (tower kind
"llm", core/text/towers.py), given ``llm_tokenizers={"gemma2-2b": tokenizer_for(spec, path)}``
for Gemma. Activation bytes for placement: ``core.archs.llm.memory.activation_bytes(config, T)``. The
network (``core.models.llm``) is placed by the memory manager like any model.
"""

from core.text.llm.encode import LlmTower, row_mask
from core.text.llm.families import (
    LUMINA2_GEMMA2,
    LUMINA2_SYSTEM_PROMPTS,
    LUMINA2_TOWER,
    QWEN_IMAGE_QWEN25VL,
    QWEN_IMAGE_TEMPLATE,
    QWEN_IMAGE_TOWER,
    Z_IMAGE_QWEN3,
    Z_IMAGE_TEMPLATE,
    Z_IMAGE_TOWER,
    LlmTowerSpec,
    lumina2_gemma2,
)
from core.text.llm.qwen_bpe import QwenTokenizer, qwen_tokenizer
from core.text.llm.spm import SpmTokenizer
from core.text.llm.tokenizers import LlmTokenizer, tokenizer_for

__all__ = [
    "LUMINA2_GEMMA2",
    "LUMINA2_SYSTEM_PROMPTS",
    "LUMINA2_TOWER",
    "QWEN_IMAGE_QWEN25VL",
    "QWEN_IMAGE_TEMPLATE",
    "QWEN_IMAGE_TOWER",
    "Z_IMAGE_QWEN3",
    "Z_IMAGE_TEMPLATE",
    "Z_IMAGE_TOWER",
    "LlmTokenizer",
    "LlmTower",
    "LlmTowerSpec",
    "QwenTokenizer",
    "SpmTokenizer",
    "lumina2_gemma2",
    "qwen_tokenizer",
    "row_mask",
    "tokenizer_for",
]
