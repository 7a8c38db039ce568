"""One :class:`Family` record per diffusion family: the table detection reads, and what every other
layer reads about a family (its ``DiffusionSpec`` names the architecture package's network, prompt
encoding and latent codec by id: docs/architecture.md, "Adding a family").

Shapes are read once per architecture (a UNet reader, an MMDiT reader, ...); each family's rule asks
its architecture's classifier and keeps the verdict only when it names that family. A family's
spec sits beside its rows. Facts from ComfyUI's ``comfy/supported_models.py`` (model sampling and
shifts, latent formats, text encoders) and the usual settings its example workflows and A1111 use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from core.detect.diffusion_dit import (
    classify_cascade,
    classify_hidream,
    classify_hunyuan_dit,
    classify_lumina2,
    classify_pixart,
    classify_qwen_image,
)
from core.detect.diffusion_flux2 import classify_flux2
from core.detect.diffusion_mmdit import classify_auraflow, classify_flux, classify_sd3
from core.detect.diffusion_unet import classify_unet
from core.detect.diffusion_video import classify_hunyuan_video, classify_ltxv, classify_wan
from core.detect.keyview import KeyView
from core.detect.registry import Family, Match, Registry
from core.detect.spec import SD2_SIZES, XL_SIZES, DiffusionSpec, GenerationDefaults, SamplingSpec

Classifier = Callable[[KeyView], list[Match]]

CHECKPOINT_PREFIX = ("model.diffusion_model.",)


@dataclass(frozen=True)
class FamilyRule:
    """A family's rule: its architecture's classifier, filtered to that family's verdicts."""

    family: str
    classify: Classifier

    def __call__(self, view: KeyView) -> Match | None:
        return next((m for m in self.classify(view) if m.family == self.family), None)


def diffusion(
    fid: str,
    title: str,
    classify: Classifier,
    latent_channels: int | None,
    default_dtype: str = "bf16",
    *,
    signature: tuple[str, ...] = (),  # only for families read from one key layout
    prefixes: tuple[str, ...] = CHECKPOINT_PREFIX,
    notes: str = "",
    latent_format: str = "",
    unet_preset: str = "",
    modelspec: str = "",
    lora_group: str = "",
    spec: DiffusionSpec | None = None,
    network_preset: str = "",
    fp16_unsafe: bool = False,
) -> Family:
    """A diffusion family's record; its rule keeps its classifier's verdicts that name it."""
    return Family(
        id=fid, group="diffusion", title=title, signature=signature, rule=FamilyRule(fid, classify),
        prefixes=prefixes, latent_channels=latent_channels, default_dtype=default_dtype, notes=notes,
        latent_format=latent_format, unet_preset=unet_preset, modelspec=modelspec, lora_group=lora_group,
        diffusion=spec, network_preset=network_preset, fp16_unsafe=fp16_unsafe,
    )  # fmt: skip


def _unet(
    fid: str, title: str, preset: str, latent: str, modelspec: str, spec: DiffusionSpec,
    lora_group: str = "", notes: str = "",
) -> Family:  # fmt: skip
    return diffusion(
        fid, title, classify_unet, 4, "fp16", notes=notes, latent_format=latent, unet_preset=preset,
        modelspec=modelspec, lora_group=lora_group, spec=spec,
    )  # fmt: skip


def _flux(
    fid: str, title: str, modelspec: str, spec: DiffusionSpec, preset: str = "", notes: str = ""
) -> Family:
    return diffusion(
        fid, title, classify_flux, 16, notes=notes, latent_format="flux", modelspec=modelspec,
        lora_group="flux", spec=spec, network_preset=preset,
    )  # fmt: skip


_DISCRETE = SamplingSpec(schedule="discrete")

# -- SD1.x, SD2.x, SDXL and the UNets built like them (core/archs/unet) ----------------------------
SD1 = DiffusionSpec(
    network="unet", sampling=_DISCRETE, text="sd1", text_encoders=("clip-l",), memory_profile="sd1",
    preview_decoder="taesd_decoder", blocks="sd1-unet",
)  # fmt: skip
SD2 = DiffusionSpec(
    network="unet", sampling=_DISCRETE, text="sd2", text_encoders=("clip-h",),
    defaults=GenerationDefaults(sizes=SD2_SIZES),
    memory_profile="sd2",  # the SD1 UNet with 64-channel heads: 4 % more than SD1's, measured
    preview_decoder="taesd_decoder", blocks="sd1-unet",  # ComfyUI's ModelMergeSD2 is its SD1 node
)  # fmt: skip
SDXL = DiffusionSpec(
    network="unet", sampling=_DISCRETE, text="sdxl", text_encoders=("clip-l", "clip-g"),
    defaults=GenerationDefaults(sizes=XL_SIZES),
    memory_profile="sdxl", preview_decoder="taesdxl_decoder", blocks="sdxl-unet",
)  # fmt: skip
#: SSD-1B and Vega: fewer blocks, the same widths, and 3 % more activations than SDXL (measured)
SDXL_DISTILLED = replace(SDXL, memory_profile="sdxl_distilled")
SDXL_REFINER = DiffusionSpec(
    network="unet", sampling=_DISCRETE, text="sdxl_refiner", text_encoders=("clip-g",),
    defaults=GenerationDefaults(sizes=XL_SIZES), memory_profile="sdxl_refiner",
)  # fmt: skip
_XL = "stable-diffusion-xl-v1-base"
UNET_FAMILIES = (
    _unet("sd1", "Stable Diffusion 1.x", "sd1", "sd1", "stable-diffusion-v1", SD1),
    _unet(
        "sd2", "Stable Diffusion 2.x", "sd2", "sd1", "stable-diffusion-v2-768-v", SD2,
        notes="v-prediction is not visible in shapes",
    ),
    _unet("sdxl", "Stable Diffusion XL", "sdxl", "sdxl", _XL, SDXL, "sdxl"),
    _unet(
        "sdxl-refiner", "Stable Diffusion XL Refiner", "sdxl_refiner", "sdxl",
        "stable-diffusion-xl-v1-refiner", SDXL_REFINER,
    ),
    _unet("ssd-1b", "Segmind SSD-1B", "ssd_1b", "sdxl", _XL, SDXL_DISTILLED, "sdxl"),
    _unet("segmind-vega", "Segmind Vega", "segmind_vega", "sdxl", _XL, SDXL_DISTILLED, "sdxl"),
)  # fmt: skip

# -- SD3 / SD3.5 (core/archs/mmdit) ---------------------------------------------------------------
SD3 = DiffusionSpec(
    network="mmdit", sampling=SamplingSpec(schedule="flow", shift=3.0, multiplier=1000.0), text="sd3",
    text_encoders=("clip-l", "clip-g", "t5-xxl"), vae="vae-sd3",
    defaults=GenerationDefaults(cfg=4.5, sizes=XL_SIZES), memory_profile="sd3_medium",
)  # fmt: skip
MMDIT_FAMILIES = (
    diffusion(
        "sd3", "Stable Diffusion 3 Medium", classify_sd3, 16, "fp16", latent_format="sd3",
        modelspec="stable-diffusion-3-medium", spec=SD3, network_preset="sd3_medium",
    ),
    diffusion(
        "sd3.5-medium", "Stable Diffusion 3.5 Medium", classify_sd3, 16, latent_format="sd3",
        modelspec="stable-diffusion-3.5-medium", spec=replace(SD3, memory_profile="sd35_medium"),
        network_preset="sd35_medium",
    ),
    diffusion(
        "sd3.5-large", "Stable Diffusion 3.5 Large", classify_sd3, 16, latent_format="sd3",
        modelspec="stable-diffusion-3.5-large", spec=replace(SD3, memory_profile="sd35_large"),
        network_preset="sd35_large",
    ),
)  # fmt: skip

# -- FLUX.1 (core/archs/flux) and Chroma (core/archs/chroma) ---------------------------------------
_FLUX_TEXT = ("clip-l", "t5-xxl")
FLUX_DEV = DiffusionSpec(
    network="flux", sampling=SamplingSpec(schedule="flux", shift=1.15), text="flux", text_encoders=_FLUX_TEXT,
    vae="vae-flux", memory_profile="flux", blocks="flux1",
    defaults=GenerationDefaults(cfg=1.0, scheduler="simple", guidance=3.5, sizes=XL_SIZES),
)  # fmt: skip
#: FLUX.1 Kontext [dev]: Flux dev's network and shapes, reference pictures (ComfyUI's Kontext
#: template: FluxKontextImageScale -> VAEEncode -> ReferenceLatent, FluxGuidance 2.5, 20 steps)
FLUX_KONTEXT = DiffusionSpec(
    network="flux", sampling=SamplingSpec(schedule="flux", shift=1.15), text="flux", text_encoders=_FLUX_TEXT,
    vae="vae-flux", memory_profile="flux", references="kontext",
    defaults=GenerationDefaults(cfg=1.0, scheduler="simple", guidance=2.5, sizes=XL_SIZES),
)  # fmt: skip
FLUX_FILL = DiffusionSpec(
    network="flux", sampling=SamplingSpec(schedule="flux", shift=1.15), text="flux", text_encoders=_FLUX_TEXT,
    vae="vae-flux", memory_profile="flux",
    # ComfyUI's Fill template: FluxGuidance 30, KSampler euler / normal at CFG 1
    defaults=GenerationDefaults(cfg=1.0, guidance=30.0, sizes=XL_SIZES),
    blocks="flux1",
)  # fmt: skip
FLUX_SCHNELL = DiffusionSpec(
    network="flux", sampling=SamplingSpec(schedule="flow", shift=1.0, multiplier=1.0), text="flux",
    text_encoders=_FLUX_TEXT, vae="vae-flux", memory_profile="flux", blocks="flux1",
    defaults=GenerationDefaults(cfg=1.0, steps=4, scheduler="simple", sizes=XL_SIZES),
)  # fmt: skip
CHROMA = DiffusionSpec(
    network="chroma", sampling=SamplingSpec(schedule="flow", shift=1.0, multiplier=1.0), text="pixart_t5",
    text_encoders=("t5-xxl",), vae="vae-flux", memory_profile="chroma",
    defaults=GenerationDefaults(cfg=1.0, scheduler="simple", sizes=XL_SIZES),
)  # fmt: skip
FLUX_FAMILIES = (
    _flux(
        "flux-dev", "FLUX.1 [dev]", "flux-1-dev", FLUX_DEV, "dev", notes="Kontext [dev] has the same shapes"
    ),
    _flux(
        "flux-kontext", "FLUX.1 Kontext [dev]", "flux-1-kontext-dev", FLUX_KONTEXT, "dev",
        notes="Flux dev's shapes: told apart by the file name or metadata",
    ),
    _flux("flux-schnell", "FLUX.1 [schnell]", "flux-1-schnell", FLUX_SCHNELL, "schnell"),
    diffusion(
        "flux-fill", "FLUX.1 Fill [dev]", classify_flux, 16, latent_format="flux",
        modelspec="flux-1-dev-fill", lora_group="flux", spec=FLUX_FILL, network_preset="fill",
        fp16_unsafe=True,
    ),
    _flux("chroma", "Chroma", "chroma", CHROMA),
)  # fmt: skip

# -- FLUX.2 klein 4B / 9B and dev (core/archs/flux2) ------------------------------------------------
#: ComfyUI's ``Flux2`` model config: flow sampling as Flux's (``ModelSamplingFlux``: shift 2.02 used
#: as the exponential time shift, timestep = sigma), the FLUX.2 VAE's 128-channel latent (its latent
#: format scales nothing: the VAE normalises), the text encoder's stacked layers. klein (distilled):
#: ComfyUI's klein templates (4 steps, CFG 1: no negative pass, ``euler``), scheduled as they are
#: with the Flux2Scheduler node (``flux2``: an empirical shift from the picture's size and the step
#: count, as diffusers' ``Flux2KleinPipeline``; core/sampling/sized_schedules.py). The model's own
#: shift 2.02 is what a KSampler's ``simple`` schedule uses. klein's base checkpoints want ~50 steps
#: and CFG 4.
_FLUX2_SAMPLING = SamplingSpec(schedule="flux", shift=2.02)
_KLEIN_DEFAULTS = GenerationDefaults(cfg=1.0, steps=4, sampler="euler", scheduler="flux2", sizes=XL_SIZES)
FLUX2_KLEIN_4B = DiffusionSpec(
    network="flux2", sampling=_FLUX2_SAMPLING, text="flux2_klein_4b", text_encoders=("qwen3-4b",),
    codec="flux2-vae", vae="vae-flux2", references="flux2", memory_profile="flux2-klein-4b",
    defaults=_KLEIN_DEFAULTS,
)  # fmt: skip
FLUX2_KLEIN_9B = DiffusionSpec(
    network="flux2", sampling=_FLUX2_SAMPLING, text="flux2_klein_9b", text_encoders=("qwen3-8b",),
    codec="flux2-vae", vae="vae-flux2", references="flux2", memory_profile="flux2-klein-9b",
    defaults=_KLEIN_DEFAULTS,
)  # fmt: skip
#: FLUX.2 dev: Mistral-Small-3 24B (layers 10/20/30, Tekken), guidance-distilled: ComfyUI's template
#: (FluxGuidance 4, CFG 1: no negative pass, ``euler``, Flux2Scheduler, 20 steps).
FLUX2_DEV = DiffusionSpec(
    network="flux2", sampling=_FLUX2_SAMPLING, text="flux2_dev", text_encoders=("mistral3-24b",),
    codec="flux2-vae", vae="vae-flux2", references="flux2", memory_profile="flux2-dev",
    defaults=GenerationDefaults(cfg=1.0, steps=20, sampler="euler", scheduler="flux2", guidance=4.0,
                                sizes=XL_SIZES),
)  # fmt: skip


def _flux2(fid: str, title: str, spec: DiffusionSpec, notes: str = "") -> Family:
    return diffusion(
        fid, title, classify_flux2, 128, notes=notes, latent_format="flux2", spec=spec, fp16_unsafe=True,
    )  # fmt: skip


FLUX2_FAMILIES = (
    _flux2("flux2-klein-4b", "FLUX.2 [klein] 4B", FLUX2_KLEIN_4B, "klein base 4B has the same shapes"),
    _flux2("flux2-klein-9b", "FLUX.2 [klein] 9B", FLUX2_KLEIN_9B, "klein base 9B has the same shapes"),
    _flux2("flux2-dev", "FLUX.2 [dev]", FLUX2_DEV),
)

# -- detected, not generated yet -------------------------------------------------------------------
#: AuraFlow's schedule is known; its network and prompt encoding are not implemented yet.
AURAFLOW = DiffusionSpec(
    network=None, sampling=SamplingSpec(schedule="flow", shift=1.73, multiplier=1.0), text=None,
    defaults=GenerationDefaults(sizes=XL_SIZES),
)  # fmt: skip
# -- Qwen-Image: its MMDiT (core/archs/qwen_image) ----------------------------------------------------
#: the sizes Qwen-Image was trained at (its model card's aspect ratios), 1328 x 1328 first
QWEN_IMAGE_SIZES = (
    (1328, 1328), (1664, 928), (928, 1664), (1472, 1104), (1104, 1472), (1584, 1056), (1056, 1584),
)  # fmt: skip
#: Qwen-Image (ComfyUI's ``QwenImage``): Qwen2.5-VL-7B's last hidden state in ComfyUI's template, its
#: system part dropped (``qwen_image``); the Wan 2.1 VAE (``wan-vae``); flow sampling with ComfyUI's
#: timestep = sigma (multiplier 1) and shift 3.1, the ``ModelSamplingAuraFlow`` node of ComfyUI's Qwen-Image
#: template (the model's own default, 1.15 on the Flux schedule, is not what its users run; diffusers
#: shifts by the picture's size instead). Defaults: that template (20 steps, CFG 2.5, ``euler``,
#: ``simple``, 1328 x 1328); the Lightning LoRAs run 4-8 steps at CFG 1.
QWEN_IMAGE = DiffusionSpec(
    network="qwen_image", sampling=SamplingSpec(schedule="flow", shift=3.1, multiplier=1.0),
    text="qwen_image", text_encoders=("qwen2.5-vl-7b",), codec="wan-vae", vae="vae-wan",
    memory_profile="qwen-image",
    defaults=GenerationDefaults(
        cfg=2.5, steps=20, sampler="euler", scheduler="simple", sizes=QWEN_IMAGE_SIZES
    ),
)  # fmt: skip
#: Qwen-Image-Edit 2509 (``qwen_image_edit``: ComfyUI's ``TextEncodeQwenImageEditPlus``, the edit
#: template with up to three pictures read by Qwen2.5-VL's vision tower, their latents the
#: references): ComfyUI's 2509 template's ``ModelSamplingAuraFlow`` shift 3; 20 steps at CFG 2.5
#: without the Lightning LoRA (the template's own run: 4 steps at CFG 1 with it); CFGNorm at
#: strength 1 on the model, as the edit templates put it.
QWEN_IMAGE_EDIT = replace(
    QWEN_IMAGE,
    text="qwen_image_edit",
    references="qwen-edit",
    sampling=SamplingSpec(schedule="flow", shift=3.0, multiplier=1.0),
    defaults=replace(QWEN_IMAGE.defaults, patches=("cfg_norm",)),
)
#: the original Qwen-Image-Edit (August 2025): ComfyUI's ``TextEncodeQwenImageEdit`` (one picture,
#: ``qwen_image_edit_2508``), otherwise as 2509's record
QWEN_IMAGE_EDIT_2508 = replace(QWEN_IMAGE_EDIT, text="qwen_image_edit_2508", references="qwen-edit-2508")
#: Qwen-Image-Edit 2511: the references modulated as at timestep 0 (the network's, from the family);
#: ComfyUI's 2511 template's shift 3.1; the model card's 40 steps at CFG 4.
QWEN_IMAGE_EDIT_2511 = replace(
    QWEN_IMAGE_EDIT,
    sampling=SamplingSpec(schedule="flow", shift=3.1, multiplier=1.0),
    defaults=replace(QWEN_IMAGE_EDIT.defaults, steps=40, cfg=4.0),
)
_CLF, _PATCH = ("clf.1.weight",), ("patch_embedding.weight",)
DETECTED_FAMILIES = (
    diffusion("auraflow", "AuraFlow", classify_auraflow, 4, prefixes=("model.",), spec=AURAFLOW),
    diffusion("hunyuan-dit", "Hunyuan-DiT", classify_hunyuan_dit, 4, "fp16", signature=("mlp_t5.0.weight",)),
    diffusion(
        "stable-cascade-c", "Stable Cascade stage C", classify_cascade, 16, signature=_CLF, fp16_unsafe=True
    ),
    diffusion("stable-cascade-b", "Stable Cascade stage B", classify_cascade, 4, signature=_CLF),
    diffusion(
        "hidream", "HiDream-I1", classify_hidream, 16, signature=("caption_projection.0.linear.weight",),
        fp16_unsafe=True,
    ),
    diffusion(
        "qwen-image", "Qwen-Image", classify_qwen_image, 16, signature=("txt_norm.weight", "img_in.weight"),
        notes="Qwen-Image, 2512 and Edit 2509/2511 have the same shapes", latent_format="wan21",
        spec=QWEN_IMAGE, lora_group="qwen-image", fp16_unsafe=True,
    ),
    diffusion(
        "qwen-image-edit", "Qwen-Image-Edit 2509", classify_qwen_image, 16,
        signature=("txt_norm.weight", "img_in.weight"), latent_format="wan21",
        notes="the same shapes as Qwen-Image: told apart by the file name (qwen_image_edit_2509...)",
        spec=QWEN_IMAGE_EDIT, lora_group="qwen-image", fp16_unsafe=True,
    ),
    diffusion(
        "qwen-image-edit-2508", "Qwen-Image-Edit (original, August 2025)", classify_qwen_image, 16,
        signature=("txt_norm.weight", "img_in.weight"), latent_format="wan21",
        notes="the same shapes as Qwen-Image: told by the file name (qwen_image_edit_bf16, no version)",
        spec=QWEN_IMAGE_EDIT_2508, lora_group="qwen-image", fp16_unsafe=True,
    ),
    diffusion(
        "qwen-image-edit-2511", "Qwen-Image-Edit 2511", classify_qwen_image, 16,
        signature=("txt_norm.weight", "img_in.weight"), latent_format="wan21",
        notes="Comfy-Org's files carry the __index_timestep_zero__ marker; GGUFs are told by the file name",
        spec=QWEN_IMAGE_EDIT_2511, lora_group="qwen-image", fp16_unsafe=True,
        network_preset="index_timestep_zero",  # its references modulated as at timestep 0
    ),
    diffusion("wan2.1", "Wan 2.1", classify_wan, 16, signature=_PATCH),
    diffusion(
        "wan2.2", "Wan 2.2", classify_wan, None, signature=_PATCH,
        notes="48 latent channels for TI2V-5B, 16 for the A14B models",
    ),
    diffusion("hunyuan-video", "HunyuanVideo", classify_hunyuan_video, 16, fp16_unsafe=True),
    diffusion("ltxv", "LTX-Video", classify_ltxv, 128, fp16_unsafe=True),
)  # fmt: skip

# -- PixArt-α and PixArt-Σ (core/archs/pixart) -----------------------------------------------------
#: ComfyUI's ``PixArtSigma`` / ``PixArtAlpha``: T5-XXL alone in ComfyUI's PixArt T5 encoding
#: (``pixart_t5``: no padding, no mask, the empty window all padding; Chroma's too); an SD 4-channel
#: VAE (Σ: SDXL's latent format, α: SD1's); a discrete eps table with betas linear from 1e-4 to
#: 0.02; the usual 20 steps at CFG 4.5 (diffusers' PixArt pipelines) on the 1024-class sizes they
#: were trained at. α's size micro-conditions are the network's (it reads them from the latent).
PIXART = DiffusionSpec(
    network="pixart", text="pixart_t5", text_encoders=("t5-xxl",), vae="vae-sd",
    sampling=SamplingSpec(schedule="discrete", beta_schedule="linear", beta_start=0.0001, beta_end=0.02),
    defaults=GenerationDefaults(cfg=4.5, steps=20, sizes=XL_SIZES), memory_profile="pixart",
)  # fmt: skip
PIXART_FAMILIES = (
    diffusion("pixart-alpha", "PixArt-α", classify_pixart, 4, "fp16", latent_format="sd1", spec=PIXART,
              lora_group="pixart"),
    diffusion("pixart-sigma", "PixArt-Σ", classify_pixart, 4, "fp16", latent_format="sdxl", spec=PIXART,
              lora_group="pixart"),
)  # fmt: skip

# -- Z-Image and Lumina 2 / NetaYume: Next-DiT (core/archs/nextdit) ----------------------------------
#: Z-Image (Turbo and Base share the shapes; ComfyUI's ``ZImage``): Qwen3-4B's penultimate hidden
#: states in its chat template (``z_image``), the Flux VAE and latent format, flow sampling with
#: shift 3 and ComfyUI's timestep = sigma (multiplier 1). Defaults: ComfyUI's Z-Image Turbo template
#: (8 steps, CFG 1 so no negative pass, ``res_multistep``, ``simple``); Base wants more steps and CFG.
Z_IMAGE = DiffusionSpec(
    network="nextdit", sampling=SamplingSpec(schedule="flow", shift=3.0, multiplier=1.0), text="z_image",
    text_encoders=("qwen3-4b",), vae="vae-flux", memory_profile="z-image", blocks="next-dit",
    defaults=GenerationDefaults(
        cfg=1.0, steps=8, sampler="res_multistep", scheduler="simple", sizes=XL_SIZES
    ),
)  # fmt: skip
#: Lumina Image 2.0 and NetaYume Lumina (ComfyUI's ``Lumina2``): Gemma-2-2B after ComfyUI's system
#: prompt (``lumina2``), the Flux VAE and latent format, flow sampling with shift 6, timestep = sigma.
#: Defaults: ComfyUI's Lumina 2 template (25 steps, CFG 4, ``res_multistep``, ``simple``).
LUMINA2 = DiffusionSpec(
    network="nextdit", sampling=SamplingSpec(schedule="flow", shift=6.0, multiplier=1.0), text="lumina2",
    text_encoders=("gemma2-2b",), vae="vae-flux", memory_profile="lumina2", blocks="next-dit",
    defaults=GenerationDefaults(
        cfg=4.0, steps=25, sampler="res_multistep", scheduler="simple", sizes=XL_SIZES
    ),
)  # fmt: skip
NEXTDIT_FAMILIES = (
    diffusion("lumina2", "Lumina Image 2.0", classify_lumina2, 16,
              notes="NetaYume Lumina has the same shapes", latent_format="flux", spec=LUMINA2,
              lora_group="lumina2", fp16_unsafe=True),
    diffusion("z-image", "Z-Image", classify_lumina2, 16,
              notes="Next-DiT (Lumina 2's network) at width 3840; Turbo and Base have the same shapes",
              latent_format="flux", spec=Z_IMAGE, lora_group="z-image", fp16_unsafe=True),
)  # fmt: skip

#: in the order detection has always tried them (ties between equal scores go to the earlier)
DIFFUSION_FAMILIES: tuple[Family, ...] = (
    *UNET_FAMILIES, *MMDIT_FAMILIES, *FLUX_FAMILIES, *FLUX2_FAMILIES, *DETECTED_FAMILIES[:2],
    *PIXART_FAMILIES,
    *DETECTED_FAMILIES[2:4], *NEXTDIT_FAMILIES, *DETECTED_FAMILIES[4:],
)  # fmt: skip


def register_diffusion_families(registry: Registry) -> None:
    """Add every diffusion family to ``registry`` (raises if one is already there)."""
    for family in DIFFUSION_FAMILIES:
        registry.add(family)
