"""The open_clip <-> transformers CLIP key map lives in its package (:mod:`core.archs.clip_text.keys`);
this module keeps the names its callers import."""

from core.archs.clip_text.keys import hf_to_open_clip, open_clip_to_hf

__all__ = ["hf_to_open_clip", "open_clip_to_hf"]
