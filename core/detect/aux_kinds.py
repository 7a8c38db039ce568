"""Upscale models and textual-inversion embeddings, from names and shapes only.

Both are small, self-contained files that must never be confused with ordinary model files: an
upscaler needs its network's full key pattern, and an embedding's key set must be exactly one of
the known embedding layouts (never "some file that happens to have two tensors").
"""

from __future__ import annotations

from dataclasses import dataclass

from core.detect.catalog import REGISTRY
from core.detect.keyview import KeyView
from core.detect.registry import Match, Registry


def match_upscale(view: KeyView, *, registry: Registry = REGISTRY) -> Match | None:
    """The best-matching upscaler family (``esrgan``, ``realesrgan-compact``, ``swinir``...), or None."""
    found = registry.match(view, "upscale")
    return found[0] if found else None


def match_preprocessor(view: KeyView, *, registry: Registry = REGISTRY) -> Match | None:
    """The preprocessor network a file holds (``depth-anything-v2`` ...), or None."""
    found = registry.match(view, "preprocessor")
    return found[0] if found else None


# Embeddings ------------------------------------------------------------------------------------

#: Text-encoder width -> (base diffusion family, the encoder it belongs to).
_WIDTHS = {768: ("sd1", "clip_l"), 1024: ("sd2", "clip_h")}
_MAX_VECTORS = 256  # A1111 caps an embedding at the prompt's 75 tokens; leave room, refuse nonsense
_FLOATS = ("F32", "F16", "BF16", "F64")


@dataclass(frozen=True)
class _Vectors:
    vectors: int
    width: int


def _vectors(view: KeyView, key: str) -> _Vectors | None:
    info = view.get(key)
    if info is None or info.dtype not in _FLOATS:
        return None
    if info.ndim == 1:
        n, width = 1, info.shape[0]
    elif info.ndim == 2:
        n, width = info.shape
    else:
        return None
    return _Vectors(n, width) if 1 <= n <= _MAX_VECTORS else None


def _single(view: KeyView, key: str, layout: str) -> Match | None:
    v = _vectors(view, key)
    if v is None or v.width not in _WIDTHS:
        return None
    family, encoder = _WIDTHS[v.width]
    return Match(
        family,
        layout=layout,
        fields={"vectors": v.vectors, "width": v.width, "widths": {encoder: v.width}},
    )


def _sdxl(view: KeyView) -> Match | None:
    l_vec, g_vec = _vectors(view, "clip_l"), _vectors(view, "clip_g")
    if l_vec is None or g_vec is None or l_vec.width != 768 or g_vec.width != 1280:
        return None
    warnings: tuple[str, ...] = ()
    if l_vec.vectors != g_vec.vectors:
        warnings = (f"clip_l has {l_vec.vectors} vectors but clip_g has {g_vec.vectors}",)
    return Match(
        "sdxl",
        layout="clip_pair",
        fields={
            "vectors": max(l_vec.vectors, g_vec.vectors),
            "width": 768 + 1280,
            "widths": {"clip_l": 768, "clip_g": 1280},
        },
        warnings=warnings,
    )


def match_embedding(view: KeyView) -> Match | None:
    """A textual-inversion embedding; ``family`` is the diffusion family it was trained for.

    Layouts: A1111 ``.pt`` (``string_to_param.*``, layout ``a1111``), A1111 safetensors
    (``emb_params``), SDXL (``clip_l`` + ``clip_g``, layout ``clip_pair``) and diffusers' concept
    files (one ``<token>`` vector, layout ``diffusers``). Fields: ``vectors``, ``width``, ``widths``.
    """
    keys = set(view)
    if not keys or len(keys) > 4:
        return None
    if keys == {"emb_params"}:
        return _single(view, "emb_params", "emb_params")
    if keys == {"clip_l", "clip_g"}:
        return _sdxl(view)
    params = [k for k in keys if k.startswith("string_to_param.")]
    if params and all(k.startswith(("string_to_param.", "string_to_token.")) for k in keys):
        if len(params) != 1:
            return None
        return _single(view, params[0], "a1111")
    if len(keys) == 1:
        (key,) = keys
        if key.startswith("<") and key.endswith(">"):
            return _single(view, key, "diffusers")
    return None
