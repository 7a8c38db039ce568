"""`loadout check` on full-size real-layout headers: every loadable family plans with zero differences.

Each file is written with ``write_sparse``: a real header with the true full-size shapes and a hole
for the data, so a 24 GB Flux costs nothing. The check is the contract's: detect the file, then
plan each component on the meta device (:func:`core.loading.plan.plan_component`) and compare
keys and shapes with the network Loadout would build. Families that detection knows but that have no
network yet must say so with ``unsupported_family`` and the list of what does load.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from core.archs.llm import LLM_FAMILIES
from core.archs.pixart.network import PixArtConfig
from core.archs.wan_vae.network import WanVAEConfig
from core.errors import ModelMismatchError
from core.loading.architectures import architecture_for, loadable_families
from core.loading.loader import _view, inspect_for_loading, load_diffusion_model
from core.loading.plan import ComponentPlan, plan_component
from core.models.chroma import ChromaConfig
from core.models.clip import CLIPTextConfig
from core.models.flux import FluxConfig
from core.models.flux2 import Flux2Config
from core.models.llm import LlmConfig, LlmTextModel
from core.models.mmdit import MMDiTConfig
from core.models.nextdit import NextDiTConfig
from core.models.qwen_image import QwenImageConfig
from core.models.t5 import T5Config
from core.models.unet import UNetConfig
from core.models.vae import VAEConfig
from tests.fixtures import layouts_encoders as enc
from tests.fixtures.diffusion_layouts_flux2 import flux2, flux2_vae
from tests.fixtures.layouts_diffusion import (
    DIFFUSERS_LAYOUTS,
    DIFFUSION_LAYOUTS,
    as_fp8,
    flux_checkpoint,
    sd1_checkpoint,
    sd2_checkpoint,
    sd3_checkpoint,
    sdxl_checkpoint,
    sdxl_refiner_checkpoint,
)
from tests.fixtures.layouts_wan_vae import wan21_vae_original
from tests.fixtures.st_files import write_sparse

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: as fast, spins against nothing

Layout = Mapping[str, Any]


def check(path: Path) -> tuple[Any, list[ComponentPlan]]:
    """What `loadout check` does: detection, then one meta-device plan per component."""
    index, det = inspect_for_loading(path)
    plans = [
        plan_component(_view(index, c), c.role, c.family, c.layout, prefix=c.prefix, name=index.path.name)
        for c in det.components
    ]
    return det, plans


def assert_clean(plan: ComponentPlan) -> None:
    report = plan.to_json()
    assert report["missing"] == [], f"{plan.family}: missing {report['missing'][:5]}"
    assert report["unexpected"] == [], f"{plan.family}: unexpected {report['unexpected'][:5]}"
    assert report["shape_mismatches"] == [], f"{plan.family}: {report['shape_mismatches'][:5]}"
    assert plan.report.ok
    # the network really is on meta: planning allocated no weights
    assert all(t.is_meta for t in plan.module.state_dict().values())


def file_params(layout: Layout, prefix: str = "", skip: frozenset[str] = frozenset()) -> int:
    total = 0
    for key, spec in layout.items():
        if not key.startswith(prefix) or key[len(prefix) :] in skip:
            continue
        shape = spec[1] if spec and isinstance(spec[0], str) else spec
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


def planned_params(plan: ComponentPlan) -> int:
    return sum(t.numel() for t in plan.module.state_dict().values())


# --- standalone component files, one per loadable family ------------------------------------------

_CLIP_H_NO_PROJECTION = dataclasses.replace(CLIPTextConfig.clip_h(), projection_dim=None)


#: case id -> (layout builder, file name, detected kind, family, config Loadout must plan, or None)
def _llm_layout(family: str) -> dict[str, tuple[int, ...]]:
    model = LlmTextModel(LlmConfig.preset(family), device="meta")
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


STANDALONE: dict[str, tuple[Callable[[], Layout], str, str, str, Any]] = {
    "sd1": (DIFFUSION_LAYOUTS["sd1"], "v1-5-unet.safetensors", "diffusion_model", "sd1", UNetConfig.sd1()),
    "sd2": (DIFFUSION_LAYOUTS["sd2"], "v2-1-unet.safetensors", "diffusion_model", "sd2", UNetConfig.sd2()),
    "sdxl": (
        DIFFUSION_LAYOUTS["sdxl"],
        "sdxl-unet.safetensors",
        "diffusion_model",
        "sdxl",
        UNetConfig.sdxl(),
    ),
    "sdxl-refiner": (
        DIFFUSION_LAYOUTS["sdxl-refiner"],
        "refiner-unet.safetensors",
        "diffusion_model",
        "sdxl-refiner",
        UNetConfig.sdxl_refiner(),
    ),
    "ssd-1b": (DIFFUSION_LAYOUTS["ssd-1b"], "ssd-1b.safetensors", "diffusion_model", "ssd-1b", None),
    "segmind-vega": (
        DIFFUSION_LAYOUTS["segmind-vega"],
        "vega.safetensors",
        "diffusion_model",
        "segmind-vega",
        None,
    ),
    "sd3": (
        DIFFUSION_LAYOUTS["sd3"],
        "mmdit.safetensors",
        "diffusion_model",
        "sd3",
        MMDiTConfig.sd3_medium(),
    ),
    "sd3.5-medium": (
        DIFFUSION_LAYOUTS["sd3.5-medium"],
        "mmdit-m.safetensors",
        "diffusion_model",
        "sd3.5-medium",
        MMDiTConfig.sd35_medium(),
    ),
    "sd3.5-large": (
        DIFFUSION_LAYOUTS["sd3.5-large"],
        "mmdit-l.safetensors",
        "diffusion_model",
        "sd3.5-large",
        MMDiTConfig.sd35_large(),
    ),
    "flux-dev": (
        DIFFUSION_LAYOUTS["flux-dev"],
        "flux1-dev.safetensors",
        "diffusion_model",
        "flux-dev",
        FluxConfig.dev(),
    ),
    # Kontext has Flux dev's shapes: its file name tells it (docs/families.md)
    "flux-kontext": (
        DIFFUSION_LAYOUTS["flux-dev"],
        "flux1-kontext-dev.safetensors",
        "diffusion_model",
        "flux-kontext",
        FluxConfig.dev(),
    ),
    "flux-schnell": (
        DIFFUSION_LAYOUTS["flux-schnell"],
        "flux1-schnell.safetensors",
        "diffusion_model",
        "flux-schnell",
        FluxConfig.schnell(),
    ),
    "flux-fill": (
        DIFFUSION_LAYOUTS["flux-fill"],
        "flux1-fill-dev.safetensors",
        "diffusion_model",
        "flux-fill",
        FluxConfig.fill(),
    ),
    "chroma": (
        DIFFUSION_LAYOUTS["chroma"],
        "chroma.safetensors",
        "diffusion_model",
        "chroma",
        ChromaConfig(),
    ),
    "pixart-alpha": (
        DIFFUSION_LAYOUTS["pixart-alpha"],
        "PixArt-XL-2-1024-MS.safetensors",
        "diffusion_model",
        "pixart-alpha",
        PixArtConfig(caption_tokens=120, pos_embed_tokens=4096, micro_condition=True),
    ),
    "pixart-sigma": (
        DIFFUSION_LAYOUTS["pixart-sigma"],
        "PixArt-Sigma-XL-2-1024-MS.safetensors",
        "diffusion_model",
        "pixart-sigma",
        PixArtConfig(caption_tokens=300),
    ),
    "lumina2": (
        DIFFUSION_LAYOUTS["lumina2"],
        "lumina_2_model_bf16.safetensors",
        "diffusion_model",
        "lumina2",
        NextDiTConfig.lumina2(),
    ),
    "z-image": (
        DIFFUSION_LAYOUTS["z-image"],
        "z_image_turbo_bf16.safetensors",
        "diffusion_model",
        "z-image",
        NextDiTConfig(),
    ),
    "qwen-image": (
        DIFFUSION_LAYOUTS["qwen-image"],
        "qwen_image_bf16.safetensors",
        "diffusion_model",
        "qwen-image",
        QwenImageConfig(),
    ),
    # Edit 2509 has Qwen-Image's exact keys, 2511 too without Comfy-Org's marker, and the August
    # original (Comfy-Org's file names it with no version): the names tell them
    "qwen-image-edit-2508": (
        DIFFUSION_LAYOUTS["qwen-image"],
        "qwen_image_edit_bf16.safetensors",
        "diffusion_model",
        "qwen-image-edit-2508",
        QwenImageConfig(),
    ),
    "qwen-image-edit": (
        DIFFUSION_LAYOUTS["qwen-image"],
        "qwen_image_edit_2509_bf16.safetensors",
        "diffusion_model",
        "qwen-image-edit",
        QwenImageConfig(),
    ),
    "qwen-image-edit-2511": (
        DIFFUSION_LAYOUTS["qwen-image"],
        "qwen_image_edit_2511_bf16.safetensors",
        "diffusion_model",
        "qwen-image-edit-2511",
        QwenImageConfig(zero_timestep_references=True),
    ),
    "flux2-klein-4b": (
        partial(flux2, "flux2-klein-4b"),
        "flux-2-klein-4b.safetensors",
        "diffusion_model",
        "flux2-klein-4b",
        Flux2Config.klein_4b(),
    ),
    "flux2-klein-9b": (
        partial(flux2, "flux2-klein-9b"),
        "flux-2-klein-9b.safetensors",
        "diffusion_model",
        "flux2-klein-9b",
        Flux2Config.klein_9b(),
    ),
    "flux2-dev": (
        partial(flux2, "flux2-dev"),
        "flux2_dev_bf16.safetensors",
        "diffusion_model",
        "flux2-dev",
        Flux2Config.dev(),
    ),
    "vae-flux2": (
        flux2_vae,
        "flux2-vae.safetensors",
        "vae",
        "vae-flux2",
        VAEConfig(latent_channels=32, scaling_factor=1.0),
    ),
    "vae-sd": (lambda: enc.vae_kl(4), "vae-ft-mse.safetensors", "vae", "vae-sd", VAEConfig.sd()),
    "vae-flux": (
        lambda: enc.vae_kl(16, quant_conv=False),
        "ae.safetensors",
        "vae",
        "vae-flux",
        VAEConfig.flux(),
    ),
    "vae-sd3": (
        lambda: enc.vae_kl(16, quant_conv=False),
        "sd3_vae.safetensors",
        "vae",
        "vae-sd3",
        VAEConfig.sd3(),
    ),
    "vae-wan": (wan21_vae_original, "wan_2.1_vae.safetensors", "vae", "vae-wan", WanVAEConfig()),
    "clip-l": (enc.clip_l_hf, "clip_l.safetensors", "text_encoder", "clip-l", CLIPTextConfig.clip_l()),
    "clip-h": (enc.clip_h_hf, "clip_h.safetensors", "text_encoder", "clip-h", _CLIP_H_NO_PROJECTION),
    "clip-g": (enc.clip_g_hf, "clip_g.safetensors", "text_encoder", "clip-g", CLIPTextConfig.clip_g()),
    "t5-xxl": (enc.t5_xxl, "t5xxl_fp16.safetensors", "text_encoder", "t5-xxl", T5Config.t5_xxl()),
    "t5-base": (enc.t5_base, "t5_base.safetensors", "text_encoder", "t5-base", T5Config.t5_base()),
    "umt5-xxl": (enc.umt5_xxl, "umt5_xxl.safetensors", "text_encoder", "umt5-xxl", T5Config.umt5_xxl()),
    # the decoder-LLM encoders at full size, in Comfy-Org's layout (their key layout is transformers')
    **{
        fam: (partial(_llm_layout, fam), f"{fam}.safetensors", "text_encoder", fam, LlmConfig.preset(fam))
        for fam in LLM_FAMILIES
    },
}


def _standalone_params() -> list[Any]:
    out = []
    for case in STANDALONE:
        marks: list[pytest.MarkDecorator] = []
        out.append(pytest.param(case, marks=marks))
    return out


def test_every_loadable_family_has_a_full_size_case() -> None:
    assert set(STANDALONE) == set(loadable_families())


@pytest.mark.parametrize("case", _standalone_params())
def test_standalone_full_size_header_passes_check(tmp_path: Path, case: str) -> None:
    build, filename, kind, family, preset = STANDALONE[case]
    layout = build()
    path = write_sparse(tmp_path / filename, layout)
    det, plans = check(path)
    assert (det.kind, det.family) == (kind, family)
    [plan] = plans
    assert (plan.role, plan.family, plan.prefix) == (kind, family, "")
    assert_clean(plan)
    arch = architecture_for(family)
    assert arch is not None
    # every weight of the file has a place in the network and nothing is left over
    assert planned_params(plan) == file_params(layout, skip=arch.harmless)
    if preset is not None:
        assert plan.config == preset


@pytest.mark.parametrize("family", ["flux-dev", "sd3.5-large", "z-image", "qwen-image"])
def test_fp8_storage_passes_check(tmp_path: Path, family: str) -> None:
    """``flux1-dev-fp8``-style files: fp8 matrices, bf16 vectors; planning reads dtypes as they are."""
    path = write_sparse(tmp_path / f"{family}-fp8.safetensors", as_fp8(DIFFUSION_LAYOUTS[family]()))
    det, [plan] = check(path)
    assert det.family == family
    assert_clean(plan)


def test_fp8_text_encoder_passes_check(tmp_path: Path) -> None:
    layout = enc.t5_xxl()
    shapes = {k: v for k, v in layout.items() if not isinstance(v[0], str)}
    assert len(shapes) == len(layout)  # all plain shapes
    path = write_sparse(tmp_path / "t5xxl_fp8_e4m3fn.safetensors", as_fp8(shapes))
    det, [plan] = check(path)
    assert det.family == "t5-xxl"
    assert_clean(plan)


# --- all-in-one checkpoints ---------------------------------------------------------------------

#: the 16-channel VAE of an SD3 checkpoint is SD3's own (its latent scale and shift differ from Flux's)
VAE16 = "vae-sd3"

#: case -> (layout builder, file name, diffusion family, {prefix: component family})
CHECKPOINTS: dict[str, tuple[Callable[[], Layout], str, str, dict[str, str]]] = {
    "sd1": (
        sd1_checkpoint,
        "v1-5-pruned-emaonly.safetensors",
        "sd1",
        {
            "model.diffusion_model.": "sd1",
            "first_stage_model.": "vae-sd",
            "cond_stage_model.transformer.": "clip-l",
        },
    ),
    "sd1-inpaint": (
        lambda: sd1_checkpoint(in_channels=9),
        "sd-v1-5-inpainting.safetensors",
        "sd1",
        {
            "model.diffusion_model.": "sd1",
            "first_stage_model.": "vae-sd",
            "cond_stage_model.transformer.": "clip-l",
        },
    ),
    "sd2": (
        sd2_checkpoint,
        "v2-1_768-ema-pruned.safetensors",
        "sd2",
        {
            "model.diffusion_model.": "sd2",
            "first_stage_model.": "vae-sd",
            "cond_stage_model.model.": "clip-h",
        },
    ),
    "sdxl": (
        sdxl_checkpoint,
        "sd_xl_base_1.0.safetensors",
        "sdxl",
        {
            "model.diffusion_model.": "sdxl",
            "first_stage_model.": "vae-sd",
            "conditioner.embedders.0.transformer.": "clip-l",
            "conditioner.embedders.1.model.": "clip-g",
        },
    ),
    "sdxl-refiner": (
        sdxl_refiner_checkpoint,
        "sd_xl_refiner_1.0.safetensors",
        "sdxl-refiner",
        {
            "model.diffusion_model.": "sdxl-refiner",
            "first_stage_model.": "vae-sd",
            "conditioner.embedders.0.model.": "clip-g",
        },
    ),
    "sd3": (
        sd3_checkpoint,
        "sd3_medium_incl_clips_t5xxlfp8.safetensors",
        "sd3",
        {
            "model.diffusion_model.": "sd3",
            "first_stage_model.": VAE16,
            "text_encoders.clip_l.transformer.": "clip-l",
            "text_encoders.clip_g.transformer.": "clip-g",
            "text_encoders.t5xxl.transformer.": "t5-xxl",
        },
    ),
    "flux-dev": (
        flux_checkpoint,
        "flux1-dev-fp8.safetensors",
        "flux-dev",
        {
            "model.diffusion_model.": "flux-dev",
            "vae.": "vae-flux",
            "text_encoders.clip_l.transformer.": "clip-l",
            "text_encoders.t5xxl.transformer.": "t5-xxl",
        },
    ),
    "flux-schnell": (
        lambda: flux_checkpoint("schnell"),
        "flux1-schnell-fp8.safetensors",
        "flux-schnell",
        {
            "model.diffusion_model.": "flux-schnell",
            "vae.": "vae-flux",
            "text_encoders.clip_l.transformer.": "clip-l",
            "text_encoders.t5xxl.transformer.": "t5-xxl",
        },
    ),
}


@pytest.mark.parametrize("case", list(CHECKPOINTS))
def test_checkpoint_full_size_header_passes_check(tmp_path: Path, case: str) -> None:
    build, filename, family, components = CHECKPOINTS[case]
    layout = build()
    det, plans = check(write_sparse(tmp_path / filename, layout))
    assert (det.kind, det.family) == ("checkpoint", family)
    found = {p.prefix: p.family for p in plans}
    assert found.keys() == components.keys()
    for prefix, fam in found.items():
        assert fam in components[prefix].split("|"), prefix
    for plan in plans:
        assert_clean(plan)
        if plan.layout == "original":  # renamed 1:1, so the counts must agree exactly
            arch = architecture_for(plan.family)
            assert arch is not None
            assert planned_params(plan) == file_params(layout, plan.prefix, arch.harmless)
    if case == "sd1-inpaint":
        assert plans[0].config == UNetConfig.sd1(in_channels=9)


def test_sd3_checkpoint_vae_is_planned_with_sd3_latent_factors(tmp_path: Path) -> None:
    path = write_sparse(tmp_path / "sd3_medium_incl_clips_t5xxlfp8.safetensors", sd3_checkpoint())
    _, plans = check(path)
    [vae] = [p for p in plans if p.role == "vae"]
    assert vae.family == "vae-sd3"
    assert vae.config == VAEConfig.sd3()


# --- other key layouts: diffusers and open_clip ---------------------------------------------------

DIFFUSERS: dict[str, tuple[Callable[[], Layout], str]] = {
    **{f"{fam}-diffusers": (build, fam) for fam, build in DIFFUSERS_LAYOUTS.items()},
    "vae-sd-diffusers": (lambda: enc.vae_kl_diffusers(4), "vae-sd"),
    "vae-flux-diffusers": (lambda: enc.vae_kl_diffusers(16, quant_conv=False), "vae-flux"),
}


@pytest.mark.parametrize("case", list(DIFFUSERS))
def test_diffusers_layout_passes_check(tmp_path: Path, case: str) -> None:
    build, family = DIFFUSERS[case]
    det, [plan] = check(write_sparse(tmp_path / "diffusion_pytorch_model.safetensors", build()))
    assert (det.family, det.layout, plan.layout) == (family, "diffusers", "diffusers")
    assert_clean(plan)
    original = {
        "sd1": UNetConfig.sd1(),
        "sdxl": UNetConfig.sdxl(),
        "sd3": MMDiTConfig.sd3_medium(),
        "flux-dev": FluxConfig.dev(),
        "vae-sd": VAEConfig.sd(),
    }
    if family in original:  # the same network as the original-layout file of the family
        assert plan.config == original[family]


OPEN_CLIP: dict[str, tuple[Callable[[], Layout], str, int]] = {
    "clip-l": (enc.clip_l_open_clip, "clip-l", 12),
    "clip-h": (enc.clip_h_open_clip, "clip-h", 24),
    "clip-g": (enc.clip_g_open_clip, "clip-g", 32),
}


@pytest.mark.parametrize("case", list(OPEN_CLIP))
def test_open_clip_layout_passes_check(tmp_path: Path, case: str) -> None:
    build, family, layers = OPEN_CLIP[case]
    det, [plan] = check(write_sparse(tmp_path / f"open_clip_{case}.safetensors", build()))
    assert (det.family, plan.layout) == (family, "open_clip")
    assert_clean(plan)
    assert plan.config.num_layers == layers
    # fused q/k/v are split, text_projection transposed: the same weights, one fewer scalar
    # (logit_scale is the contrastive temperature, not part of the text tower)
    assert planned_params(plan) == file_params(build()) - 1


# --- families that detect but do not load yet ------------------------------------------------------

UNSUPPORTED: dict[str, tuple[Callable[[], Layout], str, str]] = {
    **{
        fam: (build, "diffusion_model", fam)
        for fam, build in DIFFUSION_LAYOUTS.items()
        if fam not in loadable_families()
    },
}


def test_unsupported_list_is_what_detection_knows_minus_what_loads() -> None:
    assert {"wan2.1", "auraflow", "hunyuan-video", "ltxv", "hidream"} <= set(UNSUPPORTED)
    assert not set(UNSUPPORTED) & set(loadable_families())


@pytest.mark.parametrize("family", list(UNSUPPORTED))
def test_unsupported_family_is_a_clear_error(tmp_path: Path, family: str) -> None:
    build, role, detected = UNSUPPORTED[family]
    path = write_sparse(tmp_path / f"{family}-model.safetensors", build())
    index, det = inspect_for_loading(path)
    assert (det.kind, det.family) == (role, detected)
    [comp] = det.components
    with pytest.raises(ModelMismatchError) as err:
        plan_component(
            _view(index, comp), comp.role, comp.family, comp.layout, prefix=comp.prefix, name=path.name
        )
    e = err.value
    assert e.code == "unsupported_family"
    assert path.name in e.message and detected in e.message
    assert "cannot load it yet" in e.message
    for loadable in loadable_families():
        assert loadable in e.fix


@pytest.mark.parametrize("family", ["wan2.1", "auraflow", "ltxv"])
def test_loading_an_unsupported_family_says_so(tmp_path: Path, family: str) -> None:
    """Through the public loader too (families whose file fits in memory; see test_load_bad_input
    for one that does not)."""
    path = write_sparse(tmp_path / f"{family}.safetensors", DIFFUSION_LAYOUTS[family]())
    with pytest.raises(ModelMismatchError) as err:
        load_diffusion_model(path)
    assert err.value.code == "unsupported_family" and path.name in err.value.message
