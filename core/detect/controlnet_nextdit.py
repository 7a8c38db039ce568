"""Header-only detection of alibaba-pai's Z-Image Fun ControlNets (``Z-Image-Turbo-Fun-Controlnet-Union``
1.0, 2.0, 2.1 and 2.1 lite): a hint embedder ``control_all_x_embedder.2-1`` (ComfyUI's
``ModelPatchLoader`` marker) beside control blocks in diffusers' attention names."""

from __future__ import annotations

from core.detect.diffusion_probe import count_numbered, finish
from core.detect.keyview import KeyView
from core.detect.registry import Match

EMBEDDER = "control_all_x_embedder.2-1.weight"


def z_image_controlnet(view: KeyView) -> Match | None:
    if EMBEDDER not in view or "control_layers.0.attention.to_q.weight" not in view:
        return None
    fields = {
        "hidden_size": view.dim(EMBEDDER, 0) or 0,
        "hint_channels": (view.dim(EMBEDDER, 1) or 0) // 4,
        "control_blocks": count_numbered(view, "control_layers.", ("adaLN_modulation.0.weight",)),
        "refiner_control": "control_noise_refiner.0.after_proj.weight" in view,
    }
    probes = ("control_layers.0.attention.to_q.weight",)
    return finish(view, "z-image", layout="fun", probes=probes, fields=fields)
