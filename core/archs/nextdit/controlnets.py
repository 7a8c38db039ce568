"""The Next-DiT package's ControlNet kinds: alibaba-pai's Z-Image Fun ControlNet (:mod:`.fun_control`),
built from a file's shapes (the releases differ in their number of control blocks, their hint's
channels and their refiner blocks; ComfyUI's ``ModelPatchLoader`` tells them apart the same way)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from core.archs.control import ControlModule, ControlNetLoader
from core.archs.nextdit.fun_control import INPAINT_CHANNELS, LATENT_CHANNELS, ZImageFunControl
from core.models.nextdit.config import NextDiTConfig

if TYPE_CHECKING:
    from core.detect.types import Detection

EMBEDDER = "control_all_x_embedder.2-1.weight"
BLOCK = "control_layers.0."


def _count(shapes: Mapping[str, tuple[int, ...]], prefix: str) -> int:
    n = 0
    while f"{prefix}{n}.adaLN_modulation.0.weight" in shapes:
        n += 1
    return n


def build_fun_control(shapes: Mapping[str, tuple[int, ...]], det: Detection | None = None) -> ControlModule:
    """The Fun ControlNet a file's shapes describe, on the meta device."""
    for key in (
        EMBEDDER,
        BLOCK + "attention.norm_q.weight",
        BLOCK + "feed_forward.w1.weight",
        BLOCK + "before_proj.weight",
    ):
        if key not in shapes:
            raise KeyError(f"a Z-Image Fun ControlNet has {key}")
    dim, patch_in = shapes[EMBEDDER][:2]
    in_channels = patch_in // 4
    if in_channels not in (LATENT_CHANNELS, INPAINT_CHANNELS):
        raise ValueError(f"its hint embedder takes {in_channels} latent channels, not 16 or 33")
    head_dim = shapes[BLOCK + "attention.norm_q.weight"][0]
    cfg = NextDiTConfig(
        dim=dim,
        n_layers=0,
        n_refiner_layers=_count(shapes, "control_noise_refiner."),
        n_heads=dim // head_dim,
        n_kv_heads=shapes[BLOCK + "attention.to_k.weight"][0] // head_dim,
        ffn_hidden=shapes[BLOCK + "feed_forward.w1.weight"][0],
        adaln_dim=shapes[BLOCK + "adaLN_modulation.0.weight"][1],
    )
    return ZImageFunControl(
        cfg,
        layers=_count(shapes, "control_layers."),
        in_channels=in_channels,
        refiner_control="control_noise_refiner.0.after_proj.weight" in shapes,
        refiner_before="control_noise_refiner.0.before_proj.weight" in shapes,
        device="meta",
    )


CONTROLNETS = (ControlNetLoader("z-image-fun", ("z-image",), build_fun_control, inpaints_alone=True),)
