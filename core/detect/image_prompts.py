"""Image-prompt files, from names and shapes: CLIP's vision tower (kind ``image_encoder``, the files
in ComfyUI's ``models/clip_vision``) and IP-Adapters (kind ``ip_adapter``, ``models/ipadapter``).

* **CLIP vision**: transformers' ``CLIPVisionModelWithProjection`` layout
  (``vision_model.encoder.layers.N...``, ``visual_projection.weight``; layout ``transformers``) or
  open_clip's image tower under ``visual.`` (``visual.transformer.resblocks.N.attn.in_proj_weight``,
  ``visual.proj``; layout ``open_clip``), as ComfyUI's ``clip_vision.load`` takes them. The family
  comes from the tower's width: 1280 ViT-H/14, 1664 ViT-bigG/14, 1024 ViT-L/14 (ComfyUI reads the
  layer count; the width says the same for the real files and also for few-layer test files).
* **IP-Adapter** (h94's files and ComfyUI_IPAdapter_plus's): ``image_proj.*`` and
  ``ip_adapter.N.to_k_ip.weight`` / ``to_v_ip.weight``. The family is the diffusion family whose
  cross-attention width the k/v projections take (768 SD1, 2048 SDXL); ``plus`` when the image
  projection is the perceiver resampler (``image_proj.latents``), whose input is the vision
  tower's hidden width; a base adapter's linear projection takes the tower's projected embedding.
  The face variant has the plus layout: only the file name tells it (``variant`` ``plus-face``).

Each rule is its own function (:func:`match_clip_vision`, :func:`match_ip_adapter`) so another
encoder family's rule sits beside it.
"""

from __future__ import annotations

import re
from functools import partial

from core.detect.keyview import KeyView
from core.detect.registry import Family, Match, Registry

_HF_LAYER0 = "vision_model.encoder.layers.0.layer_norm1.weight"
_OC_LAYER0 = "visual.transformer.resblocks.0.attn.in_proj_weight"
#: tower width -> family, and the width of its projected embedding
CLIP_VISION_WIDTHS = {1280: ("clip-vit-h", 1024), 1664: ("clip-vit-bigg", 1280), 1024: ("clip-vit-l", 768)}
#: k/v input width of an IP-Adapter -> the diffusion family it is for
IP_ADAPTER_WIDTHS = {768: "sd1", 2048: "sdxl"}
_LAYER = re.compile(r"^(?:vision_model\.encoder\.layers|visual\.transformer\.resblocks)\.(\d+)\.")


def match_clip_vision(view: KeyView, family: str | None = None) -> Match | None:
    """A CLIP vision tower (of ``family`` only, when given): its layout, width and layer count."""
    if _HF_LAYER0 in view and "visual_projection.weight" in view:
        layout, width = "transformers", view.dim(_HF_LAYER0, 0)
        projection = view.dim("visual_projection.weight", 0)
    elif _OC_LAYER0 in view and "visual.proj" in view:
        layout, width = "open_clip", view.dim("visual.proj", 0)
        projection = view.dim("visual.proj", 1)
    else:
        return None
    found = CLIP_VISION_WIDTHS.get(width or 0)
    if found is None or (family is not None and found[0] != family):
        return None
    layers = len({int(m.group(1)) for k in view if (m := _LAYER.match(k))})
    warnings = () if projection == found[1] else (f"its projection is {projection} wide, not {found[1]}",)
    fields = {"width": width, "layers": layers, "projection": projection}
    return Match(found[0], layout=layout, fields=fields, warnings=warnings)


def match_ip_adapter(view: KeyView, filename: str | None = None) -> Match | None:
    """An IP-Adapter: the diffusion family, ``plus`` (and ``plus-face`` by its name) and the vision
    tower it reads (fields ``encoder``: the CLIP family, ``tokens``, ``layers``: its cross-attention
    layers, ``embeds``: which output of the tower it takes)."""
    kv = view.shape("ip_adapter.1.to_k_ip.weight")
    if kv is None or len(kv) != 2 or not view.has_prefix("image_proj."):
        return None
    family = IP_ADAPTER_WIDTHS.get(kv[1])
    layers = len(
        {k.split(".")[1] for k in view if k.startswith("ip_adapter.") and k.endswith("to_k_ip.weight")}
    )
    if "image_proj.latents" in view and "image_proj.proj_in.weight" in view:
        latents, proj_in = view.shape("image_proj.latents"), view.shape("image_proj.proj_in.weight")
        assert latents is not None and proj_in is not None
        tokens, width = latents[-2], proj_in[1]
        encoder = next((f for w, (f, _) in CLIP_VISION_WIDTHS.items() if w == width), None)
        face = filename is not None and "face" in filename.lower()
        variant, embeds = ("plus-face" if face else "plus"), "penultimate"
    elif "image_proj.proj.weight" in view and "image_proj.norm.weight" in view:
        proj, norm = view.shape("image_proj.proj.weight"), view.shape("image_proj.norm.weight")
        assert proj is not None and norm is not None
        tokens, width = proj[0] // norm[0], proj[1]
        encoder = next((f for f, p in CLIP_VISION_WIDTHS.values() if p == width), None)
        variant, embeds = None, "image_embeds"
    else:
        return None
    if family is None:
        return Match(
            "unknown", layout="ip_adapter", variant=variant,
            warnings=(f"an IP-Adapter for a {kv[1]}-wide cross-attention, which no known family has",),
        )  # fmt: skip
    fields = {
        "encoder": encoder,
        "encoder_width": width,
        "tokens": tokens,
        "layers": layers,
        "embeds": embeds,
    }
    return Match(family, layout="ip_adapter", variant=variant, fields=fields)


IMAGE_ENCODER_FAMILIES = tuple(
    Family(fid, "image_encoder", title, rule=partial(match_clip_vision, family=fid), default_dtype="fp16")
    for fid, title in (
        ("clip-vit-h", "CLIP ViT-H/14 vision"),
        ("clip-vit-bigg", "CLIP ViT-bigG/14 vision"),
        ("clip-vit-l", "CLIP ViT-L/14 vision"),
    )
)


def register(registry: Registry) -> None:
    for fam in IMAGE_ENCODER_FAMILIES:
        registry.add(fam)
