"""The :class:`~core.detect.spec.DiffusionSpec` of each family that generates, named by what it is
(the family table in ``diffusion_families`` puts one on each record). Facts from ComfyUI's
``comfy/supported_models.py`` (model sampling and shifts, latent formats, text encoders) and the
usual settings its example workflows and A1111 use.
"""

from __future__ import annotations

from core.detect.spec import (
    SD2_SIZES,
    XL_SIZES,
    DiffusionSpec,
    GenerationDefaults,
    SamplingSpec,
)

_DISCRETE = SamplingSpec(schedule="discrete")

SD1 = DiffusionSpec(
    network="unet", sampling=_DISCRETE, text="sd1", text_encoders=("clip-l",), memory_profile="sd1",
    preview_decoder="taesd_decoder",
)  # fmt: skip
SD2 = DiffusionSpec(
    network="unet", sampling=_DISCRETE, text="sd2", text_encoders=("clip-h",),
    defaults=GenerationDefaults(sizes=SD2_SIZES),
    memory_profile="sd1",  # the SD1 UNet with 64-channel heads: the same maps, fewer heads
    preview_decoder="taesd_decoder",
)  # fmt: skip
SDXL = DiffusionSpec(
    network="unet", sampling=_DISCRETE, text="sdxl", text_encoders=("clip-l", "clip-g"),
    defaults=GenerationDefaults(sizes=XL_SIZES),
    memory_profile="sdxl",  # SSD-1B and Vega: fewer blocks, the same widths (an upper bound)
    preview_decoder="taesdxl_decoder",
)  # fmt: skip
SDXL_REFINER = DiffusionSpec(
    network="unet", sampling=_DISCRETE, text="sdxl_refiner", text_encoders=("clip-g",),
    defaults=GenerationDefaults(sizes=XL_SIZES), memory_profile="sdxl",
)  # fmt: skip
SD3 = DiffusionSpec(
    network="mmdit", sampling=SamplingSpec(schedule="flow", shift=3.0, multiplier=1000.0), text="sd3",
    text_encoders=("clip-l", "clip-g", "t5-xxl"), vae="vae-sd3",
    defaults=GenerationDefaults(cfg=4.5, sizes=XL_SIZES),
)  # fmt: skip
_FLUX_TEXT = ("clip-l", "t5-xxl")
FLUX_DEV = DiffusionSpec(
    network="flux", sampling=SamplingSpec(schedule="flux", shift=1.15), text="flux", text_encoders=_FLUX_TEXT,
    vae="vae-flux", memory_profile="flux",
    defaults=GenerationDefaults(cfg=1.0, scheduler="simple", guidance=3.5, sizes=XL_SIZES),
)  # fmt: skip
FLUX_FILL = DiffusionSpec(
    network="flux", sampling=SamplingSpec(schedule="flux", shift=1.15), text="flux", text_encoders=_FLUX_TEXT,
    vae="vae-flux", memory_profile="flux", defaults=GenerationDefaults(cfg=1.0, sizes=XL_SIZES),
)  # fmt: skip
FLUX_SCHNELL = DiffusionSpec(
    network="flux", sampling=SamplingSpec(schedule="flow", shift=1.0, multiplier=1.0), text="flux",
    text_encoders=_FLUX_TEXT, vae="vae-flux", memory_profile="flux",
    defaults=GenerationDefaults(cfg=1.0, steps=4, scheduler="simple", sizes=XL_SIZES),
)  # fmt: skip
CHROMA = DiffusionSpec(
    network="chroma", sampling=SamplingSpec(schedule="flow", shift=1.0, multiplier=1.0), text="pixart_t5",
    text_encoders=("t5-xxl",), vae="vae-flux", memory_profile="flux",
    defaults=GenerationDefaults(cfg=1.0, scheduler="simple", sizes=XL_SIZES),
)  # fmt: skip
#: PixArt-Σ and PixArt-α (ComfyUI's ``PixArtSigma`` / ``PixArtAlpha``): T5-XXL alone in ComfyUI's
#: PixArt T5 encoding (``pixart_t5``: no padding, no mask, the empty window all padding; Chroma's
#: too); an SD 4-channel VAE (Σ: SDXL's latent format, α: SD1's, on the family rows); a discrete eps
#: table with betas linear from 1e-4 to 0.02; the usual 20 steps at CFG 4.5 (diffusers' PixArt
#: pipelines) on the 1024-class sizes they were trained at. α's size micro-conditions are the
#: network's (it reads them from the latent, as ComfyUI does).
PIXART = DiffusionSpec(
    network="pixart", text="pixart_t5", text_encoders=("t5-xxl",), vae="vae-sd",
    sampling=SamplingSpec(schedule="discrete", beta_schedule="linear", beta_start=0.0001, beta_end=0.02),
    defaults=GenerationDefaults(cfg=4.5, steps=20, sizes=XL_SIZES), memory_profile="pixart",
)  # fmt: skip
#: AuraFlow's schedule is known; its network and prompt encoding are not implemented yet.
AURAFLOW = DiffusionSpec(
    network=None, sampling=SamplingSpec(schedule="flow", shift=1.73, multiplier=1.0), text=None,
    defaults=GenerationDefaults(sizes=XL_SIZES),
)  # fmt: skip
#: Z-Image (Turbo and Base share the shapes; ComfyUI's ``ZImage``): Qwen3-4B's penultimate hidden
#: states in its chat template, the Flux VAE and latent format, flow sampling with shift 3 and
#: ComfyUI's timestep = sigma (multiplier 1). Defaults: ComfyUI's Z-Image Turbo template (8 steps,
#: CFG 1 so no negative pass, ``res_multistep``, ``simple``); Base wants more steps and a CFG > 1.
Z_IMAGE = DiffusionSpec(
    network="nextdit", sampling=SamplingSpec(schedule="flow", shift=3.0, multiplier=1.0), text="z_image",
    text_encoders=("qwen3-4b",), vae="vae-flux", memory_profile="z-image",
    defaults=GenerationDefaults(
        cfg=1.0, steps=8, sampler="res_multistep", scheduler="simple", sizes=XL_SIZES
    ),
)  # fmt: skip
#: Lumina Image 2.0 and NetaYume Lumina (ComfyUI's ``Lumina2``): Gemma-2-2B, the Flux VAE and latent
#: format, flow sampling with shift 6, timestep = sigma. Defaults: ComfyUI's Lumina 2 template (25
#: steps, CFG 4, ``res_multistep``, ``simple``).
LUMINA2 = DiffusionSpec(
    network="nextdit", sampling=SamplingSpec(schedule="flow", shift=6.0, multiplier=1.0), text="lumina2",
    text_encoders=("gemma2-2b",), vae="vae-flux", memory_profile="lumina2",
    defaults=GenerationDefaults(
        cfg=4.0, steps=25, sampler="res_multistep", scheduler="simple", sizes=XL_SIZES
    ),
)  # fmt: skip
