"""Text encoder, VAE and upscaler families as data: one row per family, registered by core.detect.catalog.

Adding a family is adding a row to one of the tables below. Ids follow DESIGN.md's contract
(``clip-l``, ``t5-xxl``, ``vae-sd``, ...); the LLM text encoders and upscalers follow the same
style (``llama3.1-8b``, ``qwen2.5-vl-7b``, ``esrgan``).
"""

from __future__ import annotations

from functools import partial

from core.detect.aux_preprocessors import (
    match_depth_anything,
    match_openpose_body,
    match_openpose_face,
    match_openpose_hand,
)
from core.detect.aux_upscale import match_esrgan, match_srvgg, match_swin
from core.detect.encoder_text import ClipSpec, LlmSpec, T5Spec, match_clip, match_llm, match_t5
from core.detect.encoder_vae import KlSpec, match_kl, match_wan_vae
from core.detect.keyview import KeyView
from core.detect.notes import note
from core.detect.registry import Family, Match, Registry

#: Where each text encoder sits inside the all-in-one checkpoints that carry one.
TE_PREFIXES = {
    "clip-l": (
        "cond_stage_model.transformer.",
        "conditioner.embedders.0.transformer.",
        "text_encoders.clip_l.transformer.",
    ),
    "clip-h": ("cond_stage_model.model.",),
    "clip-g": ("conditioner.embedders.1.model.", "text_encoders.clip_g.transformer."),
    "t5-xxl": ("text_encoders.t5xxl.transformer.",),
}

CLIP_SPECS = (
    ClipSpec("clip-l", "CLIP ViT-L/14 text encoder", width=768, layers=12, mlp=3072),
    ClipSpec("clip-h", "OpenCLIP ViT-H/14 text encoder", width=1024, layers=24, mlp=4096),
    ClipSpec("clip-g", "OpenCLIP ViT-bigG/14 text encoder", width=1280, layers=32, mlp=5120),
)

T5_SPECS = (
    T5Spec("t5-xxl", "T5 v1.1 XXL encoder", 4096, 24, 10240, per_block_bias=False, big_vocab=False),
    T5Spec("t5-xl", "T5 v1.1 XL encoder", 2048, 24, 5120, per_block_bias=False, big_vocab=False),
    T5Spec("t5-base", "T5 base encoder", 768, 12, 3072, per_block_bias=False, big_vocab=False),
    T5Spec("umt5-xxl", "UMT5 XXL encoder", 4096, 24, 10240, per_block_bias=True, big_vocab=True),
    T5Spec("umt5-base", "UMT5 base encoder", 768, 12, 2048, per_block_bias=True, big_vocab=True),
    T5Spec("mt5-xl", "mT5 XL encoder", 2048, 24, 5120, per_block_bias=False, big_vocab=True),
    T5Spec(
        "pile-t5-xl", "Pile-T5 XL encoder (AuraFlow)", 2048, 24, 5120, per_block_bias=True, big_vocab=False
    ),
)

LLM_SPECS = (
    LlmSpec(
        "llama3.1-8b",
        "Llama 3.1 8B",
        "llama",
        hidden=4096,
        layers=32,
        vocab=128256,
        ambiguous_with=("llava-llama3-8b",),  # HunyuanVideo's encoder has the same shapes
    ),
    LlmSpec("qwen2.5-vl-7b", "Qwen2.5-VL 7B", "qwen2", hidden=3584, layers=28, vocab=152064),
    LlmSpec("qwen2.5-vl-3b", "Qwen2.5-VL 3B", "qwen2", hidden=2048, layers=36, vocab=151936),
    LlmSpec("qwen3-0.6b", "Qwen3 0.6B", "qwen3", hidden=1024, layers=28, vocab=151936),
    LlmSpec("qwen3-4b", "Qwen3 4B", "qwen3", hidden=2560, layers=36, vocab=151936),
    LlmSpec("qwen3-8b", "Qwen3 8B", "qwen3", hidden=4096, layers=36, vocab=151936),
    LlmSpec("mistral3-24b", "Mistral Small 3 24B", "llama", hidden=5120, layers=40, vocab=131072),
    LlmSpec("gemma2-2b", "Gemma 2 2B", "gemma2", hidden=2304, layers=26, vocab=256000),
    LlmSpec("gemma3-4b", "Gemma 3 4B", "gemma3", hidden=2560, layers=34, vocab=262208),
)

_SD_VAE_WARNING = note(
    "SD1, SD2 and SDXL VAEs have identical shapes: only the file name or metadata tells them apart"
)

KL_SPECS = (
    KlSpec(
        "vae-sd",
        "SD 4-channel VAE",
        latent_channels=4,
        used_by=(
            "sd1",
            "sd2",
            "sdxl",
            "sdxl-refiner",
            "pixart-alpha",
            "pixart-sigma",
            "auraflow",
            "hunyuan-dit",
        ),
        ambiguous_with=("sd1", "sd2", "sdxl"),
        warning=_SD_VAE_WARNING,
    ),
    KlSpec(
        "vae-flux",
        "16-channel VAE",
        latent_channels=16,
        used_by=("flux-dev", "flux-schnell", "flux-fill", "chroma", "lumina2", "z-image", "hidream", "sd3"),
        ambiguous_with=("vae-sd3",),
    ),
    KlSpec(
        "vae-flux2",
        "FLUX.2 32-channel VAE",
        latent_channels=32,
        used_by=("flux2-klein-4b", "flux2-klein-9b", "flux2-dev"),
    ),
)
#: the latent format each KL VAE family carries (vae-sd: SD1 or SDXL, by the model it serves)
_KL_FORMATS = {"vae-flux": "flux", "vae-flux2": "flux2"}


def _text_encoder(spec: ClipSpec | T5Spec) -> Family:
    rule = partial(match_clip, spec) if isinstance(spec, ClipSpec) else partial(match_t5, spec)
    return Family(spec.id, "text_encoder", spec.title, rule=rule, prefixes=TE_PREFIXES.get(spec.id, ()))


def _llm(spec: LlmSpec) -> Family:
    return Family(
        spec.id,
        "text_encoder",
        spec.title,
        rule=partial(match_llm, spec),
        default_dtype="bf16",
        fp16_unsafe=True,
    )


def _kl_vae(spec: KlSpec) -> Family:
    return Family(
        spec.id,
        "vae",
        spec.title,
        rule=partial(match_kl, spec),
        prefixes=("first_stage_model.", "vae."),
        latent_channels=spec.latent_channels,
        default_dtype="fp32" if spec.id == "vae-sd" else "bf16",
        latent_format=_KL_FORMATS.get(spec.id, ""),
    )


def _swin_only(family: str, view: KeyView) -> Match | None:
    m = match_swin(view)
    return m if m is not None and m.family == family else None


TEXT_ENCODER_FAMILIES = (
    *(_text_encoder(c) for c in CLIP_SPECS),
    *(_text_encoder(t) for t in T5_SPECS),
    *(_llm(m) for m in LLM_SPECS),
)

VAE_FAMILIES = (
    *(_kl_vae(v) for v in KL_SPECS),
    # SD3's VAE has the 16-channel layout of Flux's: it is never matched by shapes, only chosen
    # from a hint or from the diffusion model it ships with (its latent scale and shift differ).
    Family(
        "vae-sd3", "vae", "SD3 16-channel VAE", latent_channels=16, default_dtype="bf16", latent_format="sd3"
    ),
    Family(
        "vae-wan",
        "vae",
        "Wan video VAE",
        rule=match_wan_vae,
        prefixes=("vae.",),
        latent_channels=16,
        default_dtype="bf16",
        latent_format="wan21",
        notes="2.1: 16 latent channels; 2.2 (TI2V-5B): 48; Qwen-Image's VAE has the 2.1 shapes",
    ),
)

UPSCALE_FAMILIES = (
    Family("esrgan", "upscale", "ESRGAN (RRDB)", rule=match_esrgan, default_dtype="fp32"),
    Family(
        "realesrgan-compact", "upscale", "Real-ESRGAN compact (SRVGG)", rule=match_srvgg, default_dtype="fp32"
    ),
    *(
        Family(fid, "upscale", title, rule=partial(_swin_only, fid), default_dtype="fp32")
        for fid, title in (("swinir", "SwinIR"), ("swin2sr", "Swin2SR"), ("hat", "HAT"))
    ),
)


#: the networks that make a ControlNet hint from a picture (core.archs.catalog.PREPROCESSOR_NETS
#: holds each one's network under the same id)
PREPROCESSOR_FAMILIES = (
    Family(
        "depth-anything-v2", "preprocessor", "Depth Anything V2", rule=match_depth_anything,
        default_dtype="fp32", notes="relative depth; vits, vitb, vitl; original and transformers layouts",
    ),
    Family(
        "openpose-body", "preprocessor", "OpenPose body", rule=match_openpose_body, default_dtype="fp32",
        notes="body_pose_model (lllyasviel/Annotators): 18 parts, 19 limbs; layers bare or under model0...",
    ),
    Family(
        "openpose-hand", "preprocessor", "OpenPose hand", rule=match_openpose_hand, default_dtype="fp32",
        notes="hand_pose_model (lllyasviel/Annotators): 21 keypoints and the background; bare or in blocks",
    ),
    Family(
        "openpose-face", "preprocessor", "OpenPose face", rule=match_openpose_face, default_dtype="fp32",
        notes="facenet (lllyasviel/Annotators): 70 keypoints and the background; the hand network's layers",
    ),
)  # fmt: skip


def register(registry: Registry) -> None:
    """Add every family of this module to ``registry`` (raises if one is already there)."""
    for fam in (*TEXT_ENCODER_FAMILIES, *VAE_FAMILIES, *UPSCALE_FAMILIES, *PREPROCESSOR_FAMILIES):
        registry.add(fam)
