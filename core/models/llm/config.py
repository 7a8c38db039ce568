"""The decoder-LLM text encoders' configuration: one frozen record per network, presets per family.

Every fact that shapes do not give away (RoPE bases and scaling, norm style, activation, soft caps,
sliding windows) is a field here and a preset value in :data:`PRESETS`, keyed by the encoder's
family id from ``core.detect.encoder_families`` (``qwen3-4b``, ``gemma2-2b``, ...). Shapes read from
a file (width, depth, heads, vocabulary) override the preset's.

ComfyUI and transformers differ on three of these facts; presets follow ComfyUI (the pictures
depend on it) and the fields let a test match transformers exactly (docs/text.md):

* Gemma-2's attention logit soft-cap (50): transformers' eager attention applies it, ComfyUI (and
  transformers' SDPA attention) does not: ``attn_softcap`` None in the preset.
* Gemma-2's sliding window (4096 on every other layer): ComfyUI does not apply it (``sliding_window``
  None in the preset; prompts are far shorter anyway). Gemma-3's (1024, five layers in six) it does.
* Llama-3.1's ``llama3`` RoPE scaling (factor 8 on the low frequencies): ComfyUI computes plain
  RoPE, so the preset has none; :class:`RopeScaling` ``kind="llama3"`` gives transformers' numbers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final, Literal

from core.errors import ModelMismatchError
from core.models.llm.vision import VisionConfig

Arch = Literal["llama", "qwen2", "qwen3", "gemma2", "gemma3"]
ARCHES: Final[tuple[Arch, ...]] = ("llama", "qwen2", "qwen3", "gemma2", "gemma3")
Activation = Literal["silu", "gelu_tanh"]


@dataclass(frozen=True)
class RopeScaling:
    """How the RoPE frequencies are changed: ``linear`` divides every frequency by ``factor``
    (Gemma-3's global layers); ``llama3`` divides only the low ones and blends the middle band
    (Llama-3.1, with the original context, low and high frequency factors)."""

    kind: Literal["linear", "llama3"]
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_positions: int = 8192

    def __post_init__(self) -> None:
        if self.factor <= 0 or self.low_freq_factor <= 0 or self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(f"invalid RoPE scaling {self}")


@dataclass(frozen=True)
class LlmConfig:
    """One decoder-only LLM used as a text encoder (no LM head: hidden states are the output)."""

    arch: Arch
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    rope_scaling: RopeScaling | None = None
    #: Gemma-3: the RoPE base of its sliding-window (local) layers; None: every layer uses rope_theta
    rope_local_theta: float | None = None
    activation: Activation = "silu"
    qkv_bias: bool = False
    attn_softcap: float | None = None
    #: keys further back than this are masked on the sliding layers; None: no sliding window
    sliding_window: int | None = None
    #: layer i slides when ``(i + 1) % sliding_period != 0`` (Gemma-3: 6, Gemma-2: 2)
    sliding_period: int = 2
    #: attention scale is ``query_pre_attn_scalar ** -0.5`` (None: ``head_dim ** -0.5``)
    query_pre_attn_scalar: float | None = None
    #: Qwen2.5-VL's multimodal RoPE: the (time, row, column) sections of the half head, in
    #: frequencies (16, 24, 24); None: 1D positions (text-only positions are the same either way)
    mrope_sections: tuple[int, ...] | None = None
    #: the vision tower the file carries (Qwen2.5-VL's ``visual.*``); None: text only
    vision: VisionConfig | None = None

    def __post_init__(self) -> None:
        sizes = (self.vocab_size, self.hidden_size, self.intermediate_size, self.num_layers)
        if min(*sizes, self.num_heads, self.num_kv_heads, self.head_dim) < 1:
            raise ValueError(f"invalid LLM config {self}: sizes must be positive")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{self.num_heads} query heads do not share {self.num_kv_heads} key/value heads")
        if self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head width, not {self.head_dim}")
        if self.mrope_sections is not None and 2 * sum(self.mrope_sections) != self.head_dim:
            raise ValueError(
                f"M-RoPE sections {self.mrope_sections} do not cover a half head of {self.head_dim}"
            )
        if self.arch not in ARCHES:
            raise ValueError(f"unknown LLM architecture {self.arch!r}: one of {ARCHES}")

    # what the arch decides (never stored twice)
    @property
    def gemma(self) -> bool:
        """Gemma's block: ``1 + w`` norms, four norms per layer, embeddings scaled by sqrt(width)."""
        return self.arch in ("gemma2", "gemma3")

    @property
    def qk_norm(self) -> bool:
        """An RMSNorm over each head's queries and keys before RoPE (Qwen3, Gemma-3)."""
        return self.arch in ("qwen3", "gemma3")

    @property
    def attention_scale(self) -> float:
        scale: float = float(self.query_pre_attn_scalar or self.head_dim) ** -0.5
        return scale

    def sliding(self, layer: int) -> bool:
        return self.sliding_window is not None and (layer + 1) % self.sliding_period != 0

    def layer_theta(self, layer: int) -> float:
        if self.rope_local_theta is not None and self.sliding(layer):
            return self.rope_local_theta
        return self.rope_theta

    def layer_scaling(self, layer: int) -> RopeScaling | None:
        """Gemma-3's scaling belongs to its global layers only."""
        if self.rope_local_theta is not None and self.sliding(layer):
            return None
        return self.rope_scaling

    @classmethod
    def preset(cls, family: str) -> LlmConfig:
        try:
            return PRESETS[family]
        except KeyError:
            raise ValueError(f"no LLM preset for {family!r}: one of {sorted(PRESETS)}") from None

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, Sequence[int]], family: str) -> LlmConfig:
        """The family's preset with the widths, depth, heads and vocabulary these ``model.*``
        (transformers layout) shapes give."""
        base = cls.preset(family)
        p = "model.layers.0."
        try:
            vocab, hidden = shapes["model.embed_tokens.weight"]
            q_rows = shapes[p + "self_attn.q_proj.weight"][0]
            kv_rows = shapes[p + "self_attn.k_proj.weight"][0]
            ffn = shapes[p + "mlp.gate_proj.weight"][0]
            head_dim = shapes[p + "self_attn.q_norm.weight"][0] if base.qk_norm else base.head_dim
        except (KeyError, ValueError) as exc:
            raise ModelMismatchError(
                f"These tensors are not a {family} text encoder in the transformers layout",
                why=f"a key or shape is missing or wrong: {exc}",
                fix="run `loadout check` on the file to see which keys differ",
            ) from exc
        if q_rows % head_dim or kv_rows % head_dim:
            raise ModelMismatchError(
                f"The attention widths ({q_rows}, {kv_rows}) are not whole heads of {head_dim}",
                why=f"{family} heads are {head_dim} wide",
                fix="the file is damaged or not this encoder; get it again",
            )
        layers = 1 + max((int(m.group(1)) for k in shapes if (m := _LAYER.match(k))), default=-1)
        return replace(
            base,
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=ffn,
            num_layers=max(layers, 1),
            num_heads=q_rows // head_dim,
            num_kv_heads=kv_rows // head_dim,
            head_dim=head_dim,
            qkv_bias=p + "self_attn.q_proj.bias" in shapes,
            vision=VisionConfig.from_shapes(shapes) if base.mrope_sections is not None else None,
        )


_LAYER = re.compile(r"model\.layers\.(\d+)\.")


def _qwen3(hidden: int, ffn: int, layers: int, heads: int) -> LlmConfig:
    return LlmConfig("qwen3", 151936, hidden, ffn, layers, heads, 8, 128)


#: Qwen2.5-VL's M-RoPE sections (time, row, column) of the 64 frequencies
QWEN25VL_MROPE: Final = (16, 24, 24)

_LLAMA3_SCALING: Final = None  # ComfyUI computes plain RoPE for Llama-3.1 (see the module notes)

_PRESETS: dict[str, LlmConfig] = {
    # Qwen3: qk-norm, GQA 8 kv heads of 128, RoPE 1e6
    "qwen3-0.6b": _qwen3(1024, 3072, 28, 16),
    "qwen3-4b": _qwen3(2560, 9728, 36, 32),
    "qwen3-8b": _qwen3(4096, 12288, 36, 32),
    # Qwen2.5(-VL) text: q/k/v biases; its multimodal RoPE is plain RoPE for text-only positions
    "qwen2.5-vl-3b": LlmConfig(
        "qwen2", 151936, 2048, 11008, 36, 16, 2, 128, qkv_bias=True, mrope_sections=QWEN25VL_MROPE
    ),
    "qwen2.5-vl-7b": LlmConfig(
        "qwen2", 152064, 3584, 18944, 28, 28, 4, 128, qkv_bias=True, mrope_sections=QWEN25VL_MROPE
    ),
    "gemma2-2b": LlmConfig(
        "gemma2",
        256000,
        2304,
        9216,
        26,
        8,
        4,
        256,
        rope_theta=10_000.0,
        activation="gelu_tanh",
        query_pre_attn_scalar=256,
    ),
    "gemma3-4b": LlmConfig(
        "gemma3",
        262208,
        2560,
        10240,
        34,
        8,
        4,
        256,
        rope_theta=1_000_000.0,
        rope_scaling=RopeScaling("linear", 8.0),
        rope_local_theta=10_000.0,
        activation="gelu_tanh",
        sliding_window=1024,
        sliding_period=6,
        query_pre_attn_scalar=256,
    ),
    "llama3.1-8b": LlmConfig(
        "llama",
        128256,
        4096,
        14336,
        32,
        32,
        8,
        128,
        rms_norm_eps=1e-5,
        rope_theta=500_000.0,
        rope_scaling=_LLAMA3_SCALING,
    ),
    "mistral3-24b": LlmConfig(
        "llama", 131072, 5120, 32768, 40, 32, 8, 128, rms_norm_eps=1e-5, rope_theta=1_000_000_000.0
    ),
}
PRESETS: Final[Mapping[str, LlmConfig]] = MappingProxyType(_PRESETS)

#: transformers' Llama-3.1 scaling, for a caller that wants transformers' numbers rather than ComfyUI's
LLAMA31_SCALING: Final = RopeScaling("llama3", 8.0, 1.0, 4.0, 8192)

__all__ = ["ARCHES", "LLAMA31_SCALING", "PRESETS", "Activation", "Arch", "LlmConfig", "RopeScaling"]
