"""Shape rules for text encoders: CLIP (transformers and open_clip layouts), T5/UMT5, and the
decoder-only LLMs newer families condition on.

Each ``read_*`` function reads the facts a file's keys and shapes give away (width, depth, vocabulary)
once; each ``match_*`` function compares those facts with one spec row of
:mod:`core.detect.encoder_families`. Nothing here mutates the view it is given.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.detect.keyview import KeyView
from core.detect.registry import Match

# CLIP ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClipSpec:
    id: str
    title: str
    width: int
    layers: int
    mlp: int


@dataclass(frozen=True)
class ClipFacts:
    layout: str  # "transformers" | "open_clip"
    width: int
    layers: int
    mlp: int | None
    vocab: int | None
    positions: int | None
    projection: int | None
    vision: bool


_HF = "text_model."
_HF_Q = "text_model.encoder.layers.0.self_attn.q_proj.weight"
_OC_QKV = "transformer.resblocks.0.attn.in_proj_weight"


def read_clip(view: KeyView) -> ClipFacts | None:
    """CLIP text-tower facts, or None when neither CLIP layout is present."""
    if _HF_Q in view:
        width = view.dim(_HF_Q, 1)
        if width is None:
            return None
        return ClipFacts(
            layout="transformers",
            width=width,
            layers=view.count_blocks(_HF + "encoder.layers."),
            mlp=view.dim(_HF + "encoder.layers.0.mlp.fc1.weight", 0),
            vocab=view.dim(_HF + "embeddings.token_embedding.weight", 0),
            positions=view.dim(_HF + "embeddings.position_embedding.weight", 0),
            projection=view.dim("text_projection.weight", 0),
            vision="vision_model.embeddings.patch_embedding.weight" in view,
        )
    if _OC_QKV in view:
        width = view.dim(_OC_QKV, 1)
        if width is None:
            return None
        return ClipFacts(
            layout="open_clip",
            width=width,
            layers=view.count_blocks("transformer.resblocks."),
            mlp=view.dim("transformer.resblocks.0.mlp.c_fc.weight", 0),
            vocab=view.dim("token_embedding.weight", 0),
            positions=view.dim("positional_embedding", 0),
            projection=view.dim("text_projection", 1),
            vision=view.startswith_any(("visual.",)),
        )
    return None


def match_clip(spec: ClipSpec, view: KeyView) -> Match | None:
    facts = read_clip(view)
    if facts is None or facts.width != spec.width:
        return None
    warnings: list[str] = []
    score = 1.0
    if facts.layers != spec.layers:
        warnings.append(
            f"{facts.layers} transformer layers where {spec.title} has {spec.layers}: "
            "a truncated or modified text encoder"
        )
        score = 0.8
    if facts.mlp is not None and facts.mlp != spec.mlp:
        warnings.append(f"feed-forward width {facts.mlp} where {spec.title} has {spec.mlp}")
        score = min(score, 0.7)
    if facts.positions is not None and facts.positions != 77:
        warnings.append(f"{facts.positions} token positions (standard CLIP has 77): a long-context variant")
    if facts.vision:
        warnings.append("the file also holds a CLIP image encoder (vision tower), which is not used here")
    return Match(
        spec.id,
        layout=facts.layout,
        fields={
            "layers": facts.layers,
            "width": facts.width,
            "mlp_width": facts.mlp,
            "vocab": facts.vocab,
            "max_positions": facts.positions,
            "projection_dim": facts.projection,
            "has_vision": facts.vision,
        },
        warnings=tuple(warnings),
        score=score,
    )


# T5 / UMT5 -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class T5Spec:
    id: str
    title: str
    d_model: int
    blocks: int
    d_ff: int
    per_block_bias: bool  # UMT5: every block has its own relative-attention bias table
    big_vocab: bool  # multilingual sentencepiece vocabulary (250k+ entries)


@dataclass(frozen=True)
class T5Facts:
    layout: str  # "transformers" | "wan"
    d_model: int
    blocks: int
    d_ff: int | None
    heads: int | None
    vocab: int | None
    gated: bool
    per_block_bias: bool
    decoder: bool


_T5_Q = "encoder.block.0.layer.0.SelfAttention.q.weight"
_T5_FF = "encoder.block.0.layer.1.DenseReluDense."
_WAN_Q = "blocks.0.attn.q.weight"
_BIG_VOCAB = 100_000


def read_t5(view: KeyView) -> T5Facts | None:
    """T5-family encoder facts, in transformers' layout or Wan's own UMT5 layout."""
    if _T5_Q in view:
        d_model = view.dim(_T5_Q, 1)
        if d_model is None:
            return None
        gated = _T5_FF + "wi_0.weight" in view
        vocab = view.dim("shared.weight", 0) or view.dim("encoder.embed_tokens.weight", 0)
        return T5Facts(
            layout="transformers",
            d_model=d_model,
            blocks=view.count_blocks("encoder.block."),
            d_ff=view.dim(_T5_FF + ("wi_0.weight" if gated else "wi.weight"), 0),
            heads=view.dim("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 1),
            vocab=vocab,
            gated=gated,
            per_block_bias="encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight" in view,
            decoder="decoder.block.0.layer.0.SelfAttention.q.weight" in view,
        )
    if _WAN_Q in view and "blocks.0.ffn.fc1.weight" in view and "token_embedding.weight" in view:
        d_model = view.dim(_WAN_Q, 1)
        if d_model is None:
            return None
        return T5Facts(
            layout="wan",
            d_model=d_model,
            blocks=view.count_blocks("blocks."),
            d_ff=view.dim("blocks.0.ffn.fc1.weight", 0),
            heads=view.dim("blocks.0.pos_embedding.embedding.weight", 1),
            vocab=view.dim("token_embedding.weight", 0),
            gated="blocks.0.ffn.gate.0.weight" in view,
            per_block_bias="blocks.1.pos_embedding.embedding.weight" in view,
            decoder=False,
        )
    return None


def match_t5(spec: T5Spec, view: KeyView) -> Match | None:
    facts = read_t5(view)
    if facts is None or facts.d_model != spec.d_model or facts.per_block_bias != spec.per_block_bias:
        return None
    warnings: list[str] = []
    score = 1.0
    if facts.vocab is None:
        warnings.append("no token embedding in the file: the vocabulary (and so the exact model) is a guess")
        score = 0.6
    elif (facts.vocab > _BIG_VOCAB) != spec.big_vocab:
        return None
    if facts.blocks != spec.blocks:
        warnings.append(f"{facts.blocks} blocks where {spec.title} has {spec.blocks}")
        score = min(score, 0.8)
    if facts.d_ff is not None and facts.d_ff != spec.d_ff:
        warnings.append(f"feed-forward width {facts.d_ff} where {spec.title} has {spec.d_ff}")
        score = min(score, 0.8)
    if facts.decoder:
        warnings.append("the file also holds a T5 decoder, which text encoding does not use")
    return Match(
        spec.id,
        layout=facts.layout,
        fields={
            "blocks": facts.blocks,
            "d_model": facts.d_model,
            "d_ff": facts.d_ff,
            "heads": facts.heads,
            "vocab": facts.vocab,
            "gated": facts.gated,
            "per_block_bias": facts.per_block_bias,
            "has_decoder": facts.decoder,
        },
        warnings=tuple(warnings),
        score=score,
    )


# Decoder-only LLMs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LlmSpec:
    id: str
    title: str
    arch: str  # "llama" | "qwen2" | "qwen3" | "gemma2" | "gemma3"
    hidden: int
    layers: int
    vocab: int | None = None
    ambiguous_with: tuple[str, ...] = ()


@dataclass(frozen=True)
class LlmFacts:
    base: str
    arch: str
    hidden: int
    layers: int
    ffn: int | None
    vocab: int | None
    kv_width: int | None
    vision: bool


_LLM_BASES = ("model.", "model.language_model.", "")


def _llm_arch(view: KeyView, p: str) -> str:
    if f"{p}layers.0.pre_feedforward_layernorm.weight" in view:
        return "gemma3" if f"{p}layers.0.self_attn.q_norm.weight" in view else "gemma2"
    if f"{p}layers.0.self_attn.q_norm.weight" in view:
        return "qwen3"
    if f"{p}layers.0.self_attn.q_proj.bias" in view:
        return "qwen2"
    return "llama"


def read_llm(view: KeyView) -> LlmFacts | None:
    """Facts of a transformers-layout decoder-only LLM (``model.layers.N.self_attn.q_proj``)."""
    for p in _LLM_BASES:
        q = f"{p}layers.0.self_attn.q_proj.weight"
        if q not in view or f"{p}layers.0.mlp.gate_proj.weight" not in view:
            continue
        hidden = view.dim(f"{p}embed_tokens.weight", 1) or view.dim(q, 1)
        if hidden is None:
            return None
        return LlmFacts(
            base=p,
            arch=_llm_arch(view, p),
            hidden=hidden,
            layers=view.count_blocks(f"{p}layers."),
            ffn=view.dim(f"{p}layers.0.mlp.gate_proj.weight", 0),
            vocab=view.dim(f"{p}embed_tokens.weight", 0),
            kv_width=view.dim(f"{p}layers.0.self_attn.k_proj.weight", 0),
            vision=view.startswith_any(("visual.", "model.visual.", "vision_tower.", "vision_model.")),
        )
    return None


def match_llm(spec: LlmSpec, view: KeyView) -> Match | None:
    facts = read_llm(view)
    if facts is None or facts.arch != spec.arch or facts.hidden != spec.hidden:
        return None
    warnings: list[str] = []
    score = 1.0
    if spec.vocab is not None and facts.vocab is not None and facts.vocab != spec.vocab:
        warnings.append(f"a vocabulary of {facts.vocab} tokens where {spec.title} has {spec.vocab}")
        score = 0.6
    if facts.layers != spec.layers:
        warnings.append(f"{facts.layers} layers where {spec.title} has {spec.layers}")
        score = 0.8
    if facts.vocab is None:
        score = min(score, 0.7)
    fields: dict[str, object] = {
        "layers": facts.layers,
        "hidden": facts.hidden,
        "intermediate": facts.ffn,
        "vocab": facts.vocab,
        "kv_width": facts.kv_width,
        "arch": facts.arch,
        "has_vision": facts.vision,
    }
    if spec.ambiguous_with:
        fields["ambiguous_with"] = list(spec.ambiguous_with)
    layout = {"model.": "transformers", "model.language_model.": "transformers-vl"}.get(facts.base, "bare")
    return Match(spec.id, layout=layout, fields=fields, warnings=tuple(warnings), score=score)
