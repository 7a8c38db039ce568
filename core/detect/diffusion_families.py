"""One :class:`Family` record per diffusion family: the table detection reads.

Shapes are read once per architecture (a UNet reader, an MMDiT reader, ...); each family's rule asks
its architecture's classifier and keeps the verdict only when it names that family. Adding a family
is adding a row here (and, for a new architecture, one classifier).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from core.detect import diffusion_specs as specs
from core.detect.diffusion_dit import (
    classify_cascade,
    classify_hidream,
    classify_hunyuan_dit,
    classify_lumina2,
    classify_pixart,
    classify_qwen_image,
)
from core.detect.diffusion_mmdit import classify_auraflow, classify_flux, classify_sd3
from core.detect.diffusion_unet import classify_unet
from core.detect.diffusion_video import classify_hunyuan_video, classify_ltxv, classify_wan
from core.detect.keyview import KeyView
from core.detect.registry import Family, Match, Registry
from core.detect.spec import DiffusionSpec

Classifier = Callable[[KeyView], list[Match]]

CHECKPOINT_PREFIX = ("model.diffusion_model.",)


@dataclass(frozen=True)
class FamilyRule:
    """A family's rule: its architecture's classifier, filtered to that family's verdicts."""

    family: str
    classify: Classifier

    def __call__(self, view: KeyView) -> Match | None:
        return next((m for m in self.classify(view) if m.family == self.family), None)


@dataclass(frozen=True)
class Row:
    id: str
    title: str
    classify: Classifier
    latent_channels: int | None
    default_dtype: str = "bf16"
    signature: tuple[str, ...] = ()  # only for families read from one key layout
    prefixes: tuple[str, ...] = CHECKPOINT_PREFIX
    notes: str = ""
    latent_format: str = ""
    unet_preset: str = ""
    modelspec: str = ""
    lora_group: str = ""
    spec: DiffusionSpec | None = None
    network_preset: str = ""
    fp16_unsafe: bool = False


def _unet(
    fid: str,
    title: str,
    preset: str,
    latent: str,
    modelspec: str,
    spec: DiffusionSpec,
    lora_group: str = "",
    notes: str = "",
) -> Row:
    return Row(
        fid,
        title,
        classify_unet,
        4,
        "fp16",
        notes=notes,
        latent_format=latent,
        unet_preset=preset,
        modelspec=modelspec,
        lora_group=lora_group,
        spec=spec,
    )


def _flux(
    fid: str, title: str, modelspec: str, spec: DiffusionSpec, preset: str = "", notes: str = ""
) -> Row:
    return Row(
        fid,
        title,
        classify_flux,
        16,
        notes=notes,
        latent_format="flux",
        modelspec=modelspec,
        lora_group="flux",
        spec=spec,
        network_preset=preset,
    )


DIFFUSION_ROWS: tuple[Row, ...] = (
    _unet("sd1", "Stable Diffusion 1.x", "sd1", "sd1", "stable-diffusion-v1", specs.SD1),
    _unet(
        "sd2",
        "Stable Diffusion 2.x",
        "sd2",
        "sd1",
        "stable-diffusion-v2-768-v",
        specs.SD2,
        notes="v-prediction is not visible in shapes",
    ),
    _unet("sdxl", "Stable Diffusion XL", "sdxl", "sdxl", "stable-diffusion-xl-v1-base", specs.SDXL, "sdxl"),
    _unet(
        "sdxl-refiner",
        "Stable Diffusion XL Refiner",
        "sdxl_refiner",
        "sdxl",
        "stable-diffusion-xl-v1-refiner",
        specs.SDXL_REFINER,
    ),
    _unet("ssd-1b", "Segmind SSD-1B", "ssd_1b", "sdxl", "stable-diffusion-xl-v1-base", specs.SDXL, "sdxl"),
    _unet(
        "segmind-vega",
        "Segmind Vega",
        "segmind_vega",
        "sdxl",
        "stable-diffusion-xl-v1-base",
        specs.SDXL,
        "sdxl",
    ),
    Row(
        "sd3",
        "Stable Diffusion 3 Medium",
        classify_sd3,
        16,
        "fp16",
        latent_format="sd3",
        modelspec="stable-diffusion-3-medium",
        spec=specs.SD3,
        network_preset="sd3_medium",
    ),
    Row(
        "sd3.5-medium",
        "Stable Diffusion 3.5 Medium",
        classify_sd3,
        16,
        latent_format="sd3",
        modelspec="stable-diffusion-3.5-medium",
        spec=specs.SD3,
        network_preset="sd35_medium",
    ),
    Row(
        "sd3.5-large",
        "Stable Diffusion 3.5 Large",
        classify_sd3,
        16,
        latent_format="sd3",
        modelspec="stable-diffusion-3.5-large",
        spec=specs.SD3,
        network_preset="sd35_large",
    ),
    _flux(
        "flux-dev",
        "FLUX.1 [dev]",
        "flux-1-dev",
        specs.FLUX_DEV,
        "dev",
        notes="Kontext [dev] has the same shapes",
    ),
    _flux("flux-schnell", "FLUX.1 [schnell]", "flux-1-schnell", specs.FLUX_SCHNELL, "schnell"),
    replace(
        _flux("flux-fill", "FLUX.1 Fill [dev]", "flux-1-dev-fill", specs.FLUX_FILL, "fill"), fp16_unsafe=True
    ),
    _flux("chroma", "Chroma", "chroma", specs.CHROMA),
    Row("auraflow", "AuraFlow", classify_auraflow, 4, prefixes=("model.",), spec=specs.AURAFLOW),
    Row("hunyuan-dit", "Hunyuan-DiT", classify_hunyuan_dit, 4, "fp16", ("mlp_t5.0.weight",)),
    Row(
        "pixart-alpha",
        "PixArt-α",
        classify_pixart,
        4,
        "fp16",
        latent_format="sd1",
        spec=specs.PIXART,
        lora_group="pixart",
    ),
    Row(
        "pixart-sigma",
        "PixArt-Σ",
        classify_pixart,
        4,
        "fp16",
        latent_format="sdxl",
        spec=specs.PIXART,
        lora_group="pixart",
    ),
    Row(
        "stable-cascade-c",
        "Stable Cascade stage C",
        classify_cascade,
        16,
        signature=("clf.1.weight",),
        fp16_unsafe=True,
    ),
    Row("stable-cascade-b", "Stable Cascade stage B", classify_cascade, 4, signature=("clf.1.weight",)),
    Row(
        "lumina2",
        "Lumina Image 2.0",
        classify_lumina2,
        16,
        notes="NetaYume Lumina has the same shapes",
        latent_format="flux",
        spec=specs.LUMINA2,
        lora_group="lumina2",
        fp16_unsafe=True,
    ),
    Row(
        "z-image",
        "Z-Image",
        classify_lumina2,
        16,
        notes="Next-DiT (Lumina 2's network) at width 3840; Turbo and Base have the same shapes",
        latent_format="flux",
        spec=specs.Z_IMAGE,
        lora_group="z-image",
        fp16_unsafe=True,
    ),
    Row(
        "hidream",
        "HiDream-I1",
        classify_hidream,
        16,
        signature=("caption_projection.0.linear.weight",),
        fp16_unsafe=True,
    ),
    Row(
        "qwen-image",
        "Qwen-Image",
        classify_qwen_image,
        16,
        signature=("txt_norm.weight", "img_in.weight"),
        fp16_unsafe=True,
    ),
    Row("wan2.1", "Wan 2.1", classify_wan, 16, signature=("patch_embedding.weight",)),
    Row(
        "wan2.2",
        "Wan 2.2",
        classify_wan,
        None,
        signature=("patch_embedding.weight",),
        notes="48 latent channels for TI2V-5B, 16 for the A14B models",
    ),
    Row("hunyuan-video", "HunyuanVideo", classify_hunyuan_video, 16, fp16_unsafe=True),
    Row("ltxv", "LTX-Video", classify_ltxv, 128, fp16_unsafe=True),
)


def register_diffusion_families(registry: Registry) -> None:
    """Add every diffusion family to ``registry`` (raises if one is already there)."""
    for row in DIFFUSION_ROWS:
        registry.add(
            Family(
                id=row.id,
                group="diffusion",
                title=row.title,
                signature=row.signature,
                rule=FamilyRule(row.id, row.classify),
                prefixes=row.prefixes,
                latent_channels=row.latent_channels,
                default_dtype=row.default_dtype,
                notes=row.notes,
                latent_format=row.latent_format,
                unet_preset=row.unet_preset,
                modelspec=row.modelspec,
                lora_group=row.lora_group,
                diffusion=row.spec,
                network_preset=row.network_preset,
                fp16_unsafe=row.fp16_unsafe,
            )
        )
