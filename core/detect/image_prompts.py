"""Image prompts' files, from names and shapes only: image encoders (kind ``image_encoder``: the
vision towers image prompts read pictures with) and style models (kind ``style_model``: FLUX
Redux). Each encoder family has its own rule function, so the families of other encoders sit
beside it as their own rows.

* **SigLIP so400m, patch 14, 384** (``siglip-so400m``; ComfyUI's
  ``clip_vision/sigclip_vision_patch14_384.safetensors``, transformers' ``SiglipVisionModel``):
  ``vision_model.encoder.layers.N``, a 4-D *biased* patch convolution (a CLIP vision tower has no
  bias and a class embedding), 1152 wide, 729 positions (27 x 27 patches of 14 pixels). The
  attention-pooling head (``vision_model.head``) may be there or not.
* **FLUX Redux** (family ``flux``: the FLUX.1 models' LoRA group, which it fits): exactly
  ``redux_up`` (encoder width -> 3 x context width) and ``redux_down`` (-> the context width).
"""

from __future__ import annotations

from core.detect.keyview import KeyView
from core.detect.registry import Family, Match, Registry

_V = "vision_model."
SIGLIP_SO400M = "siglip-so400m"
#: the style models' family: Redux fits the models of this LoRA group (FLUX.1 and its relatives)
REDUX_FAMILY = "flux"
_REDUX_KEYS = frozenset(f"redux_{p}.{t}" for p in ("up", "down") for t in ("weight", "bias"))


def match_siglip_so400m(view: KeyView) -> Match | None:
    """SigLIP so400m-patch14-384's vision tower (fields: ``width``, ``layers``, ``positions``)."""
    patch = view.shape(f"{_V}embeddings.patch_embedding.weight")
    positions = view.shape(f"{_V}embeddings.position_embedding.weight")
    if patch is None or positions is None or len(patch) != 4 or len(positions) != 2:
        return None
    if f"{_V}embeddings.patch_embedding.bias" not in view or f"{_V}embeddings.class_embedding" in view:
        return None  # a CLIP vision tower: no patch bias, a class token
    width = patch[0]
    if width != 1152 or patch[1:] != (3, 14, 14) or positions != (729, width):
        return None
    layers = view.count_blocks(f"{_V}encoder.layers.")
    if layers < 1 or view.shape(f"{_V}post_layernorm.weight") != (width,):
        return None
    fields = {"width": width, "layers": layers, "positions": positions[0], "head": f"{_V}head.probe" in view}
    warnings = () if layers == 27 else (f"{layers} layers where SigLIP so400m has 27",)
    return Match(SIGLIP_SO400M, layout="transformers", fields=fields, warnings=warnings)


def match_image_encoder(view: KeyView, registry: Registry) -> Match | None:
    """The best-matching image encoder family, or None."""
    found = registry.match(view, "image_encoder")
    return found[0] if found else None


def match_redux(view: KeyView) -> Match | None:
    """A FLUX Redux style model (fields: ``encoder_width``, ``context_width``)."""
    if set(view) != _REDUX_KEYS:
        return None
    up, down = view.shape("redux_up.weight"), view.shape("redux_down.weight")
    if up is None or down is None or len(up) != 2 or len(down) != 2:
        return None
    if down[1] != up[0] or up[0] != 3 * down[0]:
        return None
    if view.shape("redux_up.bias") != (up[0],) or view.shape("redux_down.bias") != (down[0],):
        return None
    return Match(REDUX_FAMILY, layout="redux", fields={"encoder_width": up[1], "context_width": down[0]})


def register(registry: Registry) -> None:
    registry.add(
        Family(
            SIGLIP_SO400M, "image_encoder", "SigLIP so400m (patch 14, 384)", rule=match_siglip_so400m,
            notes="FLUX Redux's image encoder (ComfyUI: clip_vision/sigclip_vision_patch14_384)",
        )
    )  # fmt: skip
