"""Image-prompt files, from names and shapes: the vision towers image prompts read pictures with
(kind ``image_encoder``, the files in ComfyUI's ``models/clip_vision``: CLIP's and SigLIP's),
IP-Adapters (kind ``ip_adapter``, ``models/ipadapter``) and style models (kind ``style_model``,
``models/style_models``: FLUX Redux).

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
  FaceID adapters (variants ``faceid``, ``faceid-portrait``, ``faceid-plus``, ``faceid-plusv2``)
  project InsightFace's face embedding with a two-layer MLP (``image_proj.proj.0``/``proj.2``).
* **SigLIP so400m, patch 14, 384** (``siglip-so400m``; ComfyUI's
  ``clip_vision/sigclip_vision_patch14_384.safetensors``, transformers' ``SiglipVisionModel``):
  ``vision_model.encoder.layers.N``, a 4-D *biased* patch convolution (a CLIP vision tower has no
  bias and a class embedding), 1152 wide, 729 positions (27 x 27 patches of 14 pixels). The
  attention-pooling head (``vision_model.head``) may be there or not.
* **FLUX Redux** (family ``flux``: the FLUX.1 models' LoRA group, which it fits): exactly
  ``redux_up`` (encoder width -> 3 x context width) and ``redux_down`` (-> the context width).

Each rule is its own function (:func:`match_clip_vision`, :func:`match_siglip_so400m`,
:func:`match_ip_adapter`, :func:`match_redux`) so another encoder family's rule sits beside it.
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
_V = "vision_model."
SIGLIP_SO400M = "siglip-so400m"
#: the style models' family: Redux fits the models of this LoRA group (FLUX.1 and its relatives)
REDUX_FAMILY = "flux"
_REDUX_KEYS = frozenset(f"redux_{p}.{t}" for p in ("up", "down") for t in ("weight", "bias"))


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


def _unsupported_variant(view: KeyView, filename: str | None) -> str | None:
    """A layout ComfyUI_IPAdapter_plus reads and Loadout does not yet: the SDXL portrait adapter
    that reads the unnormalised face embedding (``faceid-portrait-unnorm``, told by its name as the
    pack tells it) and Kolors' FaceID (``faceid-kolors``: a 4096-wide face resampler)."""
    if "image_proj.proj.3.weight" in view:
        return None  # the full-face MLP projection (read below)
    if filename is not None and "unnorm" in filename.lower():
        return "faceid-portrait-unnorm"
    out = view.shape("image_proj.perceiver_resampler.layers.0.0.to_out.weight")
    if out is not None and out[0] == 4096:
        return "faceid-kolors"
    return None


def _faceid(view: KeyView, filename: str | None) -> tuple[str, dict[str, object]] | None:
    """A FaceID adapter (the pack's ``is_faceid``: the two-layer MLP projection ``proj.0`` /
    ``proj.2`` over InsightFace's 512-wide face embedding): ``faceid`` (LoRA keys beside the
    adapter's), ``faceid-portrait`` (none, 16 tokens), ``faceid-plus`` / ``faceid-plusv2`` (the face
    resampler ``perceiver_resampler`` over CLIP vision's penultimate states of the face crop; v2 told
    by the file name, as the pack tells it)."""
    first, second = view.shape("image_proj.proj.0.weight"), view.shape("image_proj.proj.2.weight")
    norm = view.shape("image_proj.norm.weight")
    if first is None or second is None or norm is None or len(first) != 2 or len(second) != 2:
        return None
    fields: dict[str, object] = {"tokens": second[0] // norm[0], "face_width": first[1], "embeds": "face"}
    proj_in = view.shape("image_proj.perceiver_resampler.proj_in.weight")
    if proj_in is not None and len(proj_in) == 2:
        width = proj_in[1]
        fields.update(encoder=next((f for w, (f, _) in CLIP_VISION_WIDTHS.items() if w == width), None),
                      encoder_width=width, embeds="face+penultimate")  # fmt: skip
        v2 = filename is not None and "plusv2" in filename.lower()
        return ("faceid-plusv2" if v2 else "faceid-plus"), fields
    lora = any(k.startswith("ip_adapter.") and "_lora." in k for k in view)
    return ("faceid" if lora else "faceid-portrait"), fields


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
    unsupported = _unsupported_variant(view, filename)
    if unsupported is not None:
        return Match(family or "unknown", layout="ip_adapter", variant=unsupported, fields={"layers": layers})
    faceid = _faceid(view, filename)
    if faceid is not None:
        if family is None:
            why = f"a FaceID IP-Adapter for a {kv[1]}-wide cross-attention, which no known family has"
            return Match("unknown", layout="ip_adapter", variant=faceid[0], warnings=(why,))
        return Match(family, layout="ip_adapter", variant=faceid[0], fields={**faceid[1], "layers": layers})
    if "image_proj.latents" in view and "image_proj.proj_in.weight" in view:
        latents, proj_in = view.shape("image_proj.latents"), view.shape("image_proj.proj_in.weight")
        assert latents is not None and proj_in is not None
        tokens, width = latents[-2], proj_in[1]
        encoder = next((f for w, (f, _) in CLIP_VISION_WIDTHS.items() if w == width), None)
        face = filename is not None and "face" in filename.lower()
        variant, embeds = ("plus-face" if face else "plus"), "penultimate"
    elif "image_proj.proj.3.weight" in view and "image_proj.proj.0.weight" in view:
        proj = view.shape("image_proj.proj.0.weight")
        assert proj is not None
        width = proj[1]
        tokens = 257  # one per tower position: a 224 picture's 16 x 16 patches and the class token
        encoder = next((f for w, (f, _) in CLIP_VISION_WIDTHS.items() if w == width), None)
        variant, embeds = "full-face", "penultimate"
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


IMAGE_ENCODER_FAMILIES = (
    *(
        Family(fid, "image_encoder", title, rule=partial(match_clip_vision, family=fid), default_dtype="fp16")
        for fid, title in (
            ("clip-vit-h", "CLIP ViT-H/14 vision"),
            ("clip-vit-bigg", "CLIP ViT-bigG/14 vision"),
            ("clip-vit-l", "CLIP ViT-L/14 vision"),
        )
    ),
    Family(
        SIGLIP_SO400M, "image_encoder", "SigLIP so400m (patch 14, 384)", rule=match_siglip_so400m,
        notes="FLUX Redux's image encoder (ComfyUI: clip_vision/sigclip_vision_patch14_384)",
    ),
)  # fmt: skip


def register(registry: Registry) -> None:
    for fam in IMAGE_ENCODER_FAMILIES:
        registry.add(fam)
