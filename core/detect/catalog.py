"""The application's family registry, built explicitly from the family tables.

``core.detect.registry`` defines what a family record is; the tables live in
``diffusion_families`` and ``encoder_families``; this module puts them together once. Nothing is
registered as a side effect of importing a table: code that needs the families imports
:data:`REGISTRY` from here (tests build their own :class:`Registry` from the same functions).
"""

from __future__ import annotations

from core.detect.diffusion_families import register_diffusion_families
from core.detect.encoder_families import register as register_encoder_families
from core.detect.image_prompts import register as register_image_prompt_families
from core.detect.registry import Registry
from core.detect.spec import (
    LATENT_FORMATS,
    NO_MODEL_DEFAULTS,
    UNKNOWN_FAMILY_DEFAULTS,
    DiffusionSpec,
    GenerationDefaults,
    LatentFormat,
    SamplingSpec,
)
from core.errors import ModelMismatchError


def build_registry() -> Registry:
    """Every family Loadout knows: diffusion models, then text encoders, VAEs and upscalers."""
    registry = Registry()
    register_diffusion_families(registry)
    register_encoder_families(registry)
    register_image_prompt_families(registry)
    return registry


#: The one registry of the application (never changed after it is built).
REGISTRY = build_registry()


def family_title(family: str | None) -> str:
    """A family's title as sentences say it ("CLIP ViT-H/14 vision"); the id where none is known."""
    fam = REGISTRY.get(family) if family else None
    return fam.title if fam is not None else str(family)


def diffusion_spec(family: str | None, *, action: str = "generate with") -> DiffusionSpec:
    """The spec of a diffusion family that Loadout can sample from, or a clear refusal."""
    fam = REGISTRY.get(family) if family else None
    spec = fam.diffusion if fam is not None else None
    if spec is None or spec.text is None or spec.network is None:
        able = sorted(f.title for f in REGISTRY if f.diffusion is not None and f.diffusion.text is not None)
        raise ModelMismatchError(
            f"Loadout cannot {action} a {family} model yet",
            why="its prompt encoding and sampling are not implemented",
            fix=f"Use a model of a family that generates: {', '.join(dict.fromkeys(able))}",
            code="unsupported_family",
        )
    return spec


def sampling_spec(family: str) -> SamplingSpec:
    """The model sampling of a family (known for some families that cannot generate yet)."""
    fam = REGISTRY.get(family)
    if fam is None or fam.diffusion is None:
        raise ModelMismatchError(
            f"no sampling is known for the family {family!r}",
            why="the sampler needs the family's noise schedule and prediction type",
            fix="use a model of a supported family (SD1, SD2, SDXL, SD3, Flux, Chroma, AuraFlow)",
            code="unsupported_family",
        )
    return fam.diffusion.sampling


def latent_format_for(family: str) -> LatentFormat:
    """The latent format of a diffusion family, or of a VAE family that has one of its own."""
    fam = REGISTRY.get(family)
    fmt = LATENT_FORMATS.get(fam.latent_format) if fam is not None else None
    if fmt is None:
        known = sorted(f.id for f in REGISTRY if f.latent_format)
        raise ModelMismatchError(
            f"No KL-VAE latent format is known for family {family!r}",
            why="the sampler and the VAE need the scale between the VAE's latents and the model's",
            fix=f"Use one of: {', '.join(known)}",
            code="unsupported_family",
        )
    return fmt


def generation_defaults(family: str | None) -> GenerationDefaults:
    """The settings the family is usually run at (no model: SD1's; no spec: a large-model guess)."""
    if family is None:
        return NO_MODEL_DEFAULTS
    fam = REGISTRY.get(family)
    spec = fam.diffusion if fam is not None else None
    return spec.defaults if spec is not None else UNKNOWN_FAMILY_DEFAULTS


def memory_profile(family: str | None) -> str | None:
    """The activation-memory profile of a family (None: none measured)."""
    fam = REGISTRY.get(family) if family else None
    return fam.diffusion.memory_profile if fam is not None and fam.diffusion is not None else None


def lora_fits(lora_family: str | None, model_family: str) -> bool:
    """Whether a LoRA made for ``lora_family`` fits a model of ``model_family``: the same family, or
    two whose records share a ``lora_group`` (same shapes where a LoRA touches them: SDXL LoRAs on
    SSD-1B or Vega, Flux LoRAs on every Flux and Chroma; Pony and Illustrious *are* SDXL). An
    unknown base (None) is never ruled out."""
    if lora_family is None or lora_family == model_family:
        return True
    a, b = REGISTRY.get(lora_family), REGISTRY.get(model_family)
    return a is not None and b is not None and a.lora_group != "" and a.lora_group == b.lora_group


#: The family that finishes an SDXL base's picture in the refiner hand-off (KSamplerAdvanced x 2).
REFINER_FAMILY = "sdxl-refiner"
#: The base families whose latent (with its leftover noise) the refiner takes over.
_REFINER_BASES = ("sdxl",)


def refiner_follows(family: str) -> bool:
    """Whether the refiner hand-off can follow a base model of ``family``."""
    return family in _REFINER_BASES


#: The ControlNets Loadout applies: a diffusion family (or its LoRA group) -> the families detection
#: names for the ControlNet files made for it. The UNet ControlNets load through
#: ``core.loading.controlnet``; every other one through its architecture package's ``CONTROLNETS``
#: loader (``core.archs.catalog.CONTROLNETS``; a test holds the two together).
#: FLUX.1 ControlNets (InstantX / Shakker-Labs, XLabs) are detected as these, by their guidance
#: embedding; either fits every FLUX.1 model (dev, schnell, Kontext, Fill), the net computing its own
#: guidance embedding. Not Chroma (the LoRA group "flux" too): it has no pooled CLIP-L vector to give one
FLUX_CONTROLNETS = ("flux-dev", "flux-schnell")
CONTROLNETS_FOR: dict[str, tuple[str, ...]] = {
    "sd1": ("sd1",),
    "sd2": ("sd2",),
    "sdxl": ("sdxl",),
    "z-image": ("z-image",),
    # InstantX's union and inpainting nets, on every Qwen-Image model (the LoRA group: the Edit
    # models too, as ComfyUI applies them to any model of the architecture)
    "qwen-image": ("qwen-image",),
    # SD3 / SD3.5 (core/archs/mmdit): a ControlNet adds to blocks as wide as its own; SD3 Medium's
    # (InstantX) also fit SD3.5 Medium, as wide and as deep; Stability's SD3.5 ones are Large's
    "sd3": ("sd3",),
    "sd3.5-medium": ("sd3.5-medium", "sd3"),
    "sd3.5-large": ("sd3.5-large",),
    **{family: FLUX_CONTROLNETS for family in ("flux-dev", "flux-schnell", "flux-kontext", "flux-fill")},
}
#: the UNet families among them (their ControlNets copy the UNet's input side)
UNET_CONTROLNETS = ("sd1", "sd2", "sdxl")


def _controlnet_group(family: str) -> str:
    fam = REGISTRY.get(family)
    return (fam.lora_group if fam is not None else "") or family


def controlnet_family_for(family: str) -> str | None:
    """The ControlNet family that fits a diffusion model of ``family`` first (its LoRA group's,
    where it has one: SDXL ControlNets on SSD-1B and Vega as on SDXL), or None when none is applied."""
    found = CONTROLNETS_FOR.get(_controlnet_group(family)) or CONTROLNETS_FOR.get(family)
    return found[0] if found else None


def controlnet_fits(controlnet_family: str | None, model_family: str) -> bool:
    """Whether a ControlNet of ``controlnet_family`` applies to a model of ``model_family`` (the
    engine's ``wrong_controlnet`` check and the window's ControlNet lists); an unknown family
    (None: not read yet) is never ruled out."""
    if controlnet_family is None:
        return True
    fits = CONTROLNETS_FOR.get(_controlnet_group(model_family), ()) + CONTROLNETS_FOR.get(model_family, ())
    return controlnet_family in fits


def controlnet_applies(controlnet_family: str | None) -> bool:
    """Whether ControlNets of ``controlnet_family`` (detection's) are applied to any model."""
    return any(controlnet_family in fams for fams in CONTROLNETS_FOR.values())
