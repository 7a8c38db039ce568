"""T5's encoder as the loader builds it: one :class:`~core.archs.layouts.Architecture` for T5 v1.1
XXL, the original T5-base and UMT5-XXL (transformers' key names; a file holding only the tied
``encoder.embed_tokens.weight`` gets it as ``shared.weight``)."""

from __future__ import annotations

from core.archs.layouts import Architecture, Tensors
from core.models.t5 import T5Config, T5Encoder


def _t5_aliases(t: Tensors, family: str) -> Tensors:
    """``encoder.embed_tokens.weight`` is a tied copy of ``shared.weight``: use it when alone."""
    if "shared.weight" not in t and "encoder.embed_tokens.weight" in t:
        out = dict(t)
        out["shared.weight"] = out.pop("encoder.embed_tokens.weight")
        return out
    return t


T5_ARCHITECTURE = Architecture(
    "t5-encoder",
    "text_encoder",
    ("t5-xxl", "t5-base", "umt5-xxl"),
    configure=lambda shapes, family: T5Config.from_shapes(shapes),
    build=lambda cfg, device, dtype: T5Encoder(cfg, device=device, dtype=dtype),
    normalize=_t5_aliases,
    harmless=frozenset({"encoder.embed_tokens.weight"}),
)
