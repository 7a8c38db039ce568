"""CLIP text encoders: OpenAI CLIP-L (SD1, SDXL, SD3, Flux), OpenCLIP ViT-H (SD2) and ViT-bigG (SDXL).

The module's state-dict keys are exactly the Hugging Face ``CLIPTextModel`` /
``CLIPTextModelWithProjection`` layout (``text_model.encoder.layers.N.self_attn.q_proj.weight``, ...,
``text_projection.weight``), which is what SD1 checkpoints hold under ``cond_stage_model.transformer.``
and ComfyUI files under ``text_encoders.clip_l.transformer.``. Files in the open_clip layout (SD2, the
SDXL CLIP-G) are converted by :mod:`core.archs.clip_text.keys`.

Pre-norm transformer, causal self-attention, pooled output = the final-normed hidden state of the
end-of-text token, optional bias-free text projection of that pooled vector.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import LoadoutError, ModelMismatchError
from core.models.attention import attention
from core.ops.layers import OpSet, default_ops

HiddenAct = Literal["quick_gelu", "gelu"]

IGNORED_KEYS: Final = frozenset({"text_model.embeddings.position_ids"})
"""Keys real files carry that this module does not need, dropped by name when loading.

``position_ids`` is an old transformers buffer (always ``arange(77)``); some merged SD1 checkpoints
hold a corrupted (float, off-by-a-fraction) copy, so it is never read: positions come from ``arange``."""

_LAYER_KEY = re.compile(r"text_model\.encoder\.layers\.(\d+)\.")

# width -> (heads, activation) of the CLIP text towers used by Stable Diffusion families
_KNOWN_WIDTHS: Final[Mapping[int, tuple[int, HiddenAct]]] = {
    768: (12, "quick_gelu"),  # OpenAI CLIP ViT-L/14
    1024: (16, "gelu"),  # OpenCLIP ViT-H/14
    1280: (20, "gelu"),  # OpenCLIP ViT-bigG/14
}


@dataclass(frozen=True)
class CLIPTextConfig:
    """Shape and behaviour of one CLIP text tower.

    ``eos_token_id``: the pooled output is taken at the first occurrence of this token; ``None`` takes
    it at the highest token id instead (transformers' legacy behaviour for configs with
    ``eos_token_id == 2``; the same position for CLIP tokenizers, whose end-of-text id is the largest).
    """

    vocab_size: int = 49408
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_layers: int = 12
    num_heads: int = 12
    max_positions: int = 77
    hidden_act: HiddenAct = "quick_gelu"
    projection_dim: int | None = None
    eos_token_id: int | None = 49407
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        sizes = (self.vocab_size, self.hidden_size, self.intermediate_size, self.num_layers)
        if min(*sizes, self.num_heads, self.max_positions) < 1 or self.hidden_size % self.num_heads:
            raise ValueError(f"invalid CLIP text config {self}: sizes must be positive, heads divide width")
        if self.hidden_act not in ("quick_gelu", "gelu"):
            raise ValueError(f"unknown CLIP activation {self.hidden_act!r}: use 'quick_gelu' or 'gelu'")
        if self.projection_dim is not None and self.projection_dim < 1:
            raise ValueError(f"projection_dim must be positive or None, not {self.projection_dim}")

    @classmethod
    def clip_l(cls, *, projection_dim: int | None = None) -> CLIPTextConfig:
        """OpenAI CLIP ViT-L/14 text tower. SD1 files carry no projection; SD3 ones a 768x768 one."""
        return cls(projection_dim=projection_dim)

    @classmethod
    def clip_h(cls) -> CLIPTextConfig:
        """OpenCLIP ViT-H/14 text tower (SD2, 24 layers)."""
        return cls(
            hidden_size=1024, intermediate_size=4096, num_layers=24, num_heads=16, hidden_act="gelu",
            projection_dim=1024,
        )  # fmt: skip

    @classmethod
    def clip_g(cls) -> CLIPTextConfig:
        """OpenCLIP ViT-bigG/14 text tower (SDXL, SD3; 32 layers)."""
        return cls(
            hidden_size=1280, intermediate_size=5120, num_layers=32, num_heads=20, hidden_act="gelu",
            projection_dim=1280,
        )  # fmt: skip

    @classmethod
    def from_shapes(
        cls,
        shapes: Mapping[str, Sequence[int]],
        *,
        num_heads: int | None = None,
        hidden_act: HiddenAct | None = None,
        eos_token_id: int | None = 49407,
    ) -> CLIPTextConfig:
        """The config whose state dict has these (HF layout) shapes.

        Heads and activation are not visible in shapes: they come from the known towers by width
        (768 CLIP-L, 1024 CLIP-H, 1280 CLIP-G) unless given.
        """
        try:
            vocab, width = shapes["text_model.embeddings.token_embedding.weight"]
            positions = shapes["text_model.embeddings.position_embedding.weight"][0]
            intermediate = shapes["text_model.encoder.layers.0.mlp.fc1.weight"][0]
        except (KeyError, ValueError) as exc:
            raise ModelMismatchError(
                "These tensors are not a CLIP text encoder in the transformers layout",
                why=f"a key or shape is missing or wrong: {exc}",
                fix="convert open_clip files with core.archs.clip_text.keys first",
            ) from exc
        layers = 1 + max((int(m.group(1)) for k in shapes if (m := _LAYER_KEY.match(k))), default=-1)
        known_heads, known_act = _KNOWN_WIDTHS.get(width, (max(1, width // 64), "gelu"))
        projection = shapes.get("text_projection.weight")
        return cls(
            vocab_size=vocab,
            hidden_size=width,
            intermediate_size=intermediate,
            num_layers=layers,
            num_heads=num_heads or known_heads,
            max_positions=positions,
            hidden_act=hidden_act or known_act,
            projection_dim=None if projection is None else projection[0],
            eos_token_id=eos_token_id,
        )


@dataclass(frozen=True)
class CLIPOutput:
    """What one forward pass gives.

    ``last_hidden_state``: after the final layer norm. ``hidden_state``: the requested layer's output,
    *before* the final norm (transformers' ``hidden_states[output_layer]``; apply
    :meth:`CLIPTextModel.final_norm` for SD2-style "penultimate, normed"), or None when not asked for.
    ``pooled``: final-normed end-of-text token. ``text_embeds``: ``pooled`` through the text
    projection, None when the tower has none.
    """

    last_hidden_state: torch.Tensor
    hidden_state: torch.Tensor | None
    pooled: torch.Tensor
    text_embeds: torch.Tensor | None


def _compute_dtype(weight: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        return dtype
    return weight.dtype if weight.dtype in (torch.float32, torch.float16, torch.bfloat16) else torch.float32


class CLIPAttention(nn.Module):
    def __init__(self, c: CLIPTextConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.heads = c.num_heads
        w = c.hidden_size
        self.k_proj = ops.Linear(w, w, device=device, dtype=dtype)
        self.v_proj = ops.Linear(w, w, device=device, dtype=dtype)
        self.q_proj = ops.Linear(w, w, device=device, dtype=dtype)
        self.out_proj = ops.Linear(w, w, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = attention(self.q_proj(x), self.k_proj(x), self.v_proj(x), self.heads, mask)
        result: torch.Tensor = self.out_proj(out)
        return result


class CLIPMLP(nn.Module):
    def __init__(self, c: CLIPTextConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.quick_gelu = c.hidden_act == "quick_gelu"
        self.fc1 = ops.Linear(c.hidden_size, c.intermediate_size, device=device, dtype=dtype)
        self.fc2 = ops.Linear(c.intermediate_size, c.hidden_size, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.fc1(x)
        h = h * torch.sigmoid(1.702 * h) if self.quick_gelu else F.gelu(h)
        out: torch.Tensor = self.fc2(h)
        return out


class CLIPEncoderLayer(nn.Module):
    def __init__(self, c: CLIPTextConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.self_attn = CLIPAttention(c, ops, device, dtype)
        self.layer_norm1 = ops.LayerNorm(c.hidden_size, eps=c.layer_norm_eps, device=device, dtype=dtype)
        self.mlp = CLIPMLP(c, ops, device, dtype)
        self.layer_norm2 = ops.LayerNorm(c.hidden_size, eps=c.layer_norm_eps, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x), mask)
        out: torch.Tensor = x + self.mlp(self.layer_norm2(x))
        return out


class CLIPEmbeddings(nn.Module):
    def __init__(self, c: CLIPTextConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.token_embedding = ops.Embedding(c.vocab_size, c.hidden_size, device=device, dtype=dtype)
        self.position_embedding = ops.Embedding(c.max_positions, c.hidden_size, device=device, dtype=dtype)


class CLIPEncoder(nn.Module):
    def __init__(self, c: CLIPTextConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.layers = nn.ModuleList(CLIPEncoderLayer(c, ops, device, dtype) for _ in range(c.num_layers))


class CLIPTextTransformer(nn.Module):
    """The ``text_model.`` part: embeddings, encoder layers, final layer norm."""

    def __init__(self, c: CLIPTextConfig, ops: OpSet, device: Any, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.embeddings = CLIPEmbeddings(c, ops, device, dtype)
        self.encoder = CLIPEncoder(c, ops, device, dtype)
        self.final_layer_norm = ops.LayerNorm(c.hidden_size, eps=c.layer_norm_eps, device=device, dtype=dtype)


def _drop_ignored_keys(module: nn.Module, state_dict: dict[str, Any], prefix: str, *_: Any) -> None:
    for key in IGNORED_KEYS:
        state_dict.pop(prefix + key, None)


class CLIPTextModel(nn.Module):
    """A CLIP text tower in the transformers layout, built from ``ops`` (no random init)."""

    def __init__(
        self,
        config: CLIPTextConfig,
        *,
        ops: OpSet = default_ops,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.text_model = CLIPTextTransformer(config, ops, device, dtype)
        self.text_projection: nn.Linear | None = None
        if config.projection_dim is not None:
            self.text_projection = ops.Linear(
                config.hidden_size, config.projection_dim, bias=False, device=device, dtype=dtype
            )
        self.register_load_state_dict_pre_hook(_drop_ignored_keys)  # type: ignore[no-untyped-call]

    def final_norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The final layer norm, for callers that want an intermediate layer normed (SD2, clip skip)."""
        out: torch.Tensor = self.text_model.final_layer_norm(hidden)
        return out

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        output_layer: int | None = None,
        dtype: torch.dtype | None = None,
        vectors: Sequence[tuple[int, int, torch.Tensor]] = (),
    ) -> CLIPOutput:
        """Encode token ids (B, L).

        ``vectors``: (row, position, vector of the tower's width) that replace those positions'
        token embeddings (textual-inversion embeddings; the ids there only fill the place).

        ``attention_mask`` (B, L), 1 = real token, 0 = padding, combined with the causal mask (SD
        families pass none). ``output_layer`` indexes the hidden states as transformers does:
        0 = embeddings, k = after k layers, -1 = last layer, -2 = penultimate. ``dtype`` is the compute
        dtype (default: the weights' dtype; float32 for storage dtypes torch cannot compute in).
        """
        c = self.config
        batch, length = input_ids.shape
        if length > c.max_positions:
            raise LoadoutError(
                f"The prompt is {length} tokens long but this CLIP encoder takes at most {c.max_positions}",
                why="CLIP has one learned position embedding per token position",
                fix=f"split the prompt into chunks of {c.max_positions} tokens",
                code="prompt_too_long",
            )
        layers = self.text_model.encoder.layers
        wanted = None if output_layer is None else _layer_index(output_layer, len(layers))
        emb = self.text_model.embeddings
        dt = _compute_dtype(emb.token_embedding.weight, dtype)
        positions = torch.arange(length, device=input_ids.device)
        tokens: torch.Tensor = emb.token_embedding(input_ids, out_dtype=dt)
        if vectors:
            tokens = _place_vectors(tokens, vectors)
        x = tokens + emb.position_embedding(positions, out_dtype=dt)
        mask = _causal_mask(attention_mask, length, dt, input_ids.device)
        hidden = x if wanted == 0 else None
        for i, layer in enumerate(layers, start=1):
            x = layer(x, mask)
            if i == wanted:
                hidden = x
        last = self.final_norm(x)
        if c.eos_token_id is None:
            eos_at = input_ids.to(torch.int).argmax(dim=-1)
        else:
            eos_at = (input_ids == c.eos_token_id).to(torch.int).argmax(dim=-1)
        pooled = last[torch.arange(batch, device=last.device), eos_at.to(last.device)]
        embeds: torch.Tensor | None = None if self.text_projection is None else self.text_projection(pooled)
        return CLIPOutput(last_hidden_state=last, hidden_state=hidden, pooled=pooled, text_embeds=embeds)


def _place_vectors(tokens: torch.Tensor, vectors: Sequence[tuple[int, int, torch.Tensor]]) -> torch.Tensor:
    out = tokens.clone()
    for row, pos, vector in vectors:
        if vector.shape != (tokens.shape[-1],):
            raise ValueError(f"a {tuple(vector.shape)} vector cannot replace a {tokens.shape[-1]}-wide token")
        out[row, pos] = vector.to(device=out.device, dtype=out.dtype)
    return out


def _layer_index(output_layer: int, num_layers: int) -> int:
    index = output_layer if output_layer >= 0 else num_layers + 1 + output_layer
    if not 0 <= index <= num_layers:
        raise ValueError(
            f"output_layer {output_layer} is out of range for {num_layers} layers "
            f"(use {-num_layers - 1}..{num_layers}; -1 last, -2 penultimate)"
        )
    return index


def _causal_mask(
    attention_mask: torch.Tensor | None, length: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """Additive mask (1 or B, 1, L, L): future positions and padded keys get the dtype's minimum
    (not -inf, so a row with every key masked stays finite, as in transformers)."""
    allowed = torch.ones(length, length, dtype=torch.bool, device=device).tril()[None, None]
    if attention_mask is not None:
        allowed = allowed & attention_mask.to(device=device, dtype=torch.bool)[:, None, None, :]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)
