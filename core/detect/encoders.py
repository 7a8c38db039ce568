"""Which text encoder or VAE a (prefix-stripped) view of keys holds, from names and shapes only.

The caller finds the slot (``cond_stage_model.transformer.``, ``first_stage_model.``, a standalone
file's root) and hands the stripped view here. Both functions return every family that matches,
best first, and an empty list when none does; they never mutate the view.
"""

from __future__ import annotations

from core.detect.catalog import REGISTRY
from core.detect.keyview import KeyView
from core.detect.registry import Match, Registry


def match_text_encoder(view: KeyView, *, registry: Registry = REGISTRY) -> list[Match]:
    """CLIP (transformers or open_clip layout), T5/UMT5 and LLM text encoders in ``view``."""
    return registry.match(view, "text_encoder")


def match_vae(view: KeyView, *, registry: Registry = REGISTRY) -> list[Match]:
    """KL VAEs (4- and 16-channel, original or diffusers layout) and Wan's video VAE in ``view``."""
    return registry.match(view, "vae")
