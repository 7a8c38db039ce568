"""Text encoders and VAEs detected from real-layout headers written to disk and read back."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.detect.catalog import REGISTRY
from core.detect.encoder_families import register
from core.detect.encoders import match_text_encoder, match_vae
from core.detect.keyview import KeyView
from core.detect.registry import Registry
from core.files import read_tensor_index
from tests.fixtures import layouts_encoders as L
from tests.fixtures.st_files import write_sparse

# Key counts taken from transformers' / diffusers' own modules built on the meta device
# (CLIPTextModel, CLIPTextModelWithProjection, T5EncoderModel, AutoencoderKL): the fixtures are
# the real layouts, not approximations.
KEY_COUNTS = [
    (lambda: L.clip_l_hf(), 197),  # 196 + the old persistent position_ids buffer
    (lambda: L.clip_l_hf(position_ids=False), 196),
    (lambda: L.clip_g_hf(), 518),
    (lambda: L.t5_xxl(), 219),  # shared.weight only (embed_tokens is tied and not saved)
    (lambda: L.umt5_xxl(), 242),
    (lambda: L.vae_kl(4), 248),
    (lambda: L.vae_kl(16, quant_conv=False), 244),
    (lambda: L.vae_kl_diffusers(4), 248),
    (lambda: L.llama31_8b(), 290),
]


@pytest.mark.parametrize(("make", "count"), KEY_COUNTS)
def test_fixture_layouts_have_the_real_key_counts(make: Callable[[], L.Layout], count: int) -> None:
    assert len(make()) == count


def view_of(tmp_path: Path, layout: L.Layout, prefix: str = "", *, dtype: str = "F16") -> KeyView:
    path = write_sparse(tmp_path / "model.safetensors", layout, dtype=dtype)
    return KeyView(read_tensor_index(path).tensors, prefix)


TE_CASES: list[tuple[str, Callable[[], L.Layout], str, str, dict[str, Any]]] = [
    (
        "clip-l-hf",
        L.clip_l_hf,
        "clip-l",
        "transformers",
        {"layers": 12, "width": 768, "projection_dim": None},
    ),
    ("clip-h-hf", L.clip_h_hf, "clip-h", "transformers", {"layers": 24, "width": 1024, "vocab": 49408}),
    (
        "clip-g-hf",
        L.clip_g_hf,
        "clip-g",
        "transformers",
        {"layers": 32, "mlp_width": 5120, "projection_dim": 1280},
    ),
    ("clip-l-oc", L.clip_l_open_clip, "clip-l", "open_clip", {"layers": 12, "width": 768}),
    ("clip-h-oc", L.clip_h_open_clip, "clip-h", "open_clip", {"layers": 24, "max_positions": 77}),
    ("clip-g-oc", L.clip_g_open_clip, "clip-g", "open_clip", {"layers": 32, "projection_dim": 1280}),
    (
        "t5-xxl",
        L.t5_xxl,
        "t5-xxl",
        "transformers",
        {"blocks": 24, "d_model": 4096, "d_ff": 10240, "heads": 64},
    ),
    ("t5-base", L.t5_base, "t5-base", "transformers", {"blocks": 12, "d_model": 768, "gated": False}),
    ("umt5-xxl", L.umt5_xxl, "umt5-xxl", "transformers", {"vocab": 256384, "per_block_bias": True}),
    ("umt5-wan", L.umt5_xxl_wan, "umt5-xxl", "wan", {"blocks": 24, "d_ff": 10240, "heads": 64}),
    ("llama", L.llama31_8b, "llama3.1-8b", "transformers", {"layers": 32, "vocab": 128256, "kv_width": 1024}),
    ("qwen-vl", L.qwen25_vl_7b, "qwen2.5-vl-7b", "transformers", {"layers": 28, "has_vision": True}),
    ("gemma2", L.gemma2_2b, "gemma2-2b", "transformers", {"layers": 26, "arch": "gemma2"}),
]


@pytest.mark.parametrize(
    ("make", "family", "layout", "fields"), [c[1:] for c in TE_CASES], ids=[c[0] for c in TE_CASES]
)
def test_text_encoder_files(
    tmp_path: Path, make: Callable[[], L.Layout], family: str, layout: str, fields: dict[str, Any]
) -> None:
    found = match_text_encoder(view_of(tmp_path, make()))
    assert [m.family for m in found] == [family]
    best = found[0]
    assert best.layout == layout
    assert {k: best.fields[k] for k in fields} == fields
    assert best.score == 1.0
    assert match_vae(view_of(tmp_path, make())) == []


CHECKPOINT_SLOTS = [
    ("cond_stage_model.transformer.", L.clip_l_hf, "clip-l", "transformers"),  # SD1
    ("cond_stage_model.model.", L.clip_h_open_clip, "clip-h", "open_clip"),  # SD2
    ("conditioner.embedders.0.transformer.", L.clip_l_hf, "clip-l", "transformers"),  # SDXL
    ("conditioner.embedders.1.model.", L.clip_g_open_clip, "clip-g", "open_clip"),  # SDXL
    ("text_encoders.clip_g.transformer.", L.clip_g_hf, "clip-g", "transformers"),  # SD3
    ("text_encoders.t5xxl.transformer.", L.t5_xxl, "t5-xxl", "transformers"),  # SD3 / Flux all-in-one
]


@pytest.mark.parametrize(("prefix", "make", "family", "layout"), CHECKPOINT_SLOTS)
def test_text_encoder_inside_a_checkpoint(
    tmp_path: Path, prefix: str, make: Callable[[], L.Layout], family: str, layout: str
) -> None:
    unet = {"model.diffusion_model.input_blocks.0.0.weight": (320, 4, 3, 3)}
    vae = L.prefixed(L.vae_kl(4), "first_stage_model.")
    layout_all = {**unet, **vae, **L.prefixed(make(), prefix)}
    found = match_text_encoder(view_of(tmp_path, layout_all, prefix))
    assert [(m.family, m.layout) for m in found] == [(family, layout)]
    vaes = match_vae(view_of(tmp_path, layout_all, "first_stage_model."))
    assert [m.family for m in vaes] == ["vae-sd"]
    # The unstripped whole checkpoint is neither a text encoder nor a VAE.
    assert match_text_encoder(view_of(tmp_path, layout_all)) == []
    assert match_vae(view_of(tmp_path, layout_all)) == []


def test_fp8_scaled_t5_is_still_t5_xxl(tmp_path: Path) -> None:
    layout: L.Layout = dict(L.t5_xxl())
    for key in [k for k in layout if k.endswith("q.weight")]:
        layout[key.replace(".weight", ".scale_weight")] = ("F32", ())
    layout["scaled_fp8"] = ("F8_E4M3", (0,))
    found = match_text_encoder(view_of(tmp_path, layout, dtype="F8_E4M3"))
    assert [m.family for m in found] == ["t5-xxl"]


def test_t5_without_embedding_is_a_lower_confidence_guess(tmp_path: Path) -> None:
    layout = {k: v for k, v in L.t5_xxl().items() if k != "shared.weight"}
    (best,) = match_text_encoder(view_of(tmp_path, layout))
    assert best.family == "t5-xxl" and best.score < 1.0
    assert best.fields["vocab"] is None
    assert any("vocabulary" in w for w in best.warnings)


def test_truncated_clip_is_flagged(tmp_path: Path) -> None:
    layout = {k: v for k, v in L.clip_l_hf().items() if ".layers.11." not in k}
    (best,) = match_text_encoder(view_of(tmp_path, layout))
    assert best.family == "clip-l" and best.fields["layers"] == 11 and best.score < 1.0
    assert any("11 transformer layers" in w for w in best.warnings)


def test_t5_decoder_and_umt5_vocab_decide(tmp_path: Path) -> None:
    # A per-block bias table with a 32k vocabulary at d_model 2048 is Pile-T5 (AuraFlow), not UMT5.
    pile = L.t5_encoder(d_model=2048, d_ff=5120, blocks=24, heads=32, vocab=32128, per_block_bias=True)
    assert [m.family for m in match_text_encoder(view_of(tmp_path, pile))] == ["pile-t5-xl"]
    mt5 = L.t5_encoder(d_model=2048, d_ff=5120, blocks=24, heads=32, vocab=250112)
    assert [m.family for m in match_text_encoder(view_of(tmp_path, mt5))] == ["mt5-xl"]


VAE_CASES: list[tuple[str, Callable[[], L.Layout], str, str, dict[str, Any]]] = [
    (
        "sd",
        lambda: L.vae_kl(4),
        "vae-sd",
        "original",
        {"latent_channels": 4, "downscale": 8, "channel_mult": [1, 2, 4, 4], "quant_conv": True},
    ),
    (
        "sd-diffusers",
        lambda: L.vae_kl_diffusers(4),
        "vae-sd",
        "diffusers",
        {"latent_channels": 4, "downscale": 8},
    ),
    (
        "flux",
        lambda: L.vae_kl(16, quant_conv=False),
        "vae-flux",
        "original",
        {"latent_channels": 16, "quant_conv": False, "ambiguous_with": ["vae-sd3"]},
    ),
    (
        "flux-diffusers",
        lambda: L.vae_kl_diffusers(16, quant_conv=False),
        "vae-flux",
        "diffusers",
        {"latent_channels": 16, "base_channels": 128},
    ),
    ("wan2.1", lambda: L.wan_vae(16), "vae-wan", "original", {"latent_channels": 16, "patch_size": 1}),
    ("wan2.2", lambda: L.wan_vae(48), "vae-wan", "original", {"latent_channels": 48, "patch_size": 2}),
]


@pytest.mark.parametrize(
    ("make", "family", "layout", "fields"), [c[1:] for c in VAE_CASES], ids=[c[0] for c in VAE_CASES]
)
def test_vae_files(
    tmp_path: Path, make: Callable[[], L.Layout], family: str, layout: str, fields: dict[str, Any]
) -> None:
    found = match_vae(view_of(tmp_path, make()))
    assert [m.family for m in found] == [family]
    best = found[0]
    assert best.layout == layout
    assert {k: best.fields[k] for k in fields} == fields
    assert match_text_encoder(view_of(tmp_path, make())) == []


def test_sd_vae_says_sd1_sd2_sdxl_cannot_be_told_apart(tmp_path: Path) -> None:
    (best,) = match_vae(view_of(tmp_path, L.vae_kl(4)))
    assert best.fields["ambiguous_with"] == ["sd1", "sd2", "sdxl"]
    assert any("identical shapes" in w for w in best.warnings)


def test_wan_variants(tmp_path: Path) -> None:
    (v21,) = match_vae(view_of(tmp_path, L.wan_vae(16)))
    (v22,) = match_vae(view_of(tmp_path, L.wan_vae(48)))
    assert (v21.variant, v22.variant) == ("wan2.1", "wan2.2")
    # Qwen-Image's VAE is Wan 2.1's network: no family of its own to be ambiguous with, a user
    assert "ambiguous_with" not in v21.fields and "ambiguous_with" not in v22.fields
    assert "qwen-image" in v21.fields["used_by"] and not v21.warnings


def test_decoder_only_and_f4_vaes_are_flagged(tmp_path: Path) -> None:
    decoder_only = {k: v for k, v in L.vae_kl(4).items() if not k.startswith(("encoder.", "quant_conv"))}
    (dec,) = match_vae(view_of(tmp_path, decoder_only))
    assert dec.family == "vae-sd" and dec.fields["has_encoder"] is False
    assert any("decoder only" in w for w in dec.warnings)
    (f4,) = match_vae(view_of(tmp_path, L.vae_kl(4, mult=(1, 2, 4))))
    assert f4.fields["downscale"] == 4 and f4.score < 1.0


def unet_like() -> L.Layout:
    return {
        "input_blocks.0.0.weight": (320, 4, 3, 3),
        "input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight": (320, 768),
        "middle_block.1.proj_in.weight": (1280, 1280, 1, 1),
        "out.2.weight": (4, 320, 3, 3),
        "time_embed.0.weight": (1280, 320),
    }


def lora_like() -> L.Layout:
    return {
        "lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight": (8, 768),
        "lora_te_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight": (768, 8),
        "lora_te_text_model_encoder_layers_0_self_attn_q_proj.alpha": (),
        "text_model.encoder.layers.0.self_attn.q_proj.lora_A.weight": (8, 768),
        "text_model.encoder.layers.0.self_attn.q_proj.lora_B.weight": (768, 8),
        "decoder.conv_in.lora_down.weight": (8, 4, 3, 3),
    }


NEGATIVES = {
    "unet": unet_like,
    "lora": lora_like,
    "vq-vae": lambda: {**L.vae_kl(4), "quantize.embedding.weight": (8192, 4)},
    "3d-vae": lambda: {
        "decoder.conv_in.weight": (512, 16, 3, 3, 3),
        "decoder.up_blocks.0.resnets.0.conv1.weight": (512, 512, 3, 3, 3),
    },
    "clip-b": lambda: L.clip_text_hf(512, 12),
    "two-tensors": lambda: {"weight": (768, 768), "bias": (768,)},
}


@pytest.mark.parametrize("make", NEGATIVES.values(), ids=NEGATIVES.keys())
def test_not_a_text_encoder_or_vae(tmp_path: Path, make: Callable[[], L.Layout]) -> None:
    view = view_of(tmp_path, make())
    assert match_text_encoder(view) == []
    assert match_vae(view) == []


def test_matchers_never_mutate_their_input() -> None:
    for make in (L.clip_g_open_clip, L.t5_xxl, L.llama31_8b, lambda: L.vae_kl(4), lambda: L.wan_vae(48)):
        tensors = L.tensor_infos(make())
        before = copy.deepcopy(tensors)
        view = KeyView(tensors)
        match_text_encoder(view)
        match_vae(view)
        assert tensors == before and list(tensors) == list(before)


def test_families_are_registered_once_with_their_groups() -> None:
    groups = {f.id: f.group for f in REGISTRY}
    for fid in ("clip-l", "clip-h", "clip-g", "t5-xxl", "t5-base", "umt5-xxl", "llama3.1-8b", "gemma2-2b"):
        assert groups[fid] == "text_encoder"
    for fid in ("vae-sd", "vae-flux", "vae-wan"):
        assert groups[fid] == "vae"
    for fid in ("esrgan", "realesrgan-compact", "swinir"):
        assert groups[fid] == "upscale"
    fresh = Registry()
    register(fresh)
    with pytest.raises(ValueError, match="registered twice"):
        register(fresh)
