"""Adapter modules onto model weights: every family x naming scheme, slices of fused weights,
routing to text encoders, shape mismatches and garbage reported (never raised), real PEFT output.

Bases are sparse full-size checkpoints (real headers, no data); the adapters are written in each
trainer's naming with the expected target of every module worked out independently
(``tests/fixtures/keymap_cases.py``), so a module landing on the wrong weight fails as surely as
one landing nowhere.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from core.detect.keyview import KeyView
from core.detect.lora import LoraAnalysis, analyze_lora
from core.errors import ModelMismatchError
from core.files.tensor_info import TensorInfo
from core.models.flux import FluxConfig
from core.patching.keymap import MatchReport, Target, match_lora, match_lora_headers, model_key_index
from core.patching.keymap_headers import header_components
from tests.fixtures.keymap_cases import (
    ALGORITHMS,
    BASES,
    Case,
    algorithm_case,
    case,
    cases,
    flux_pairs,
    sd3_pairs,
)
from tests.fixtures.layouts_diffusion import DIFFUSION_LAYOUTS
from tests.fixtures.layouts_lora import (
    Layer,
    clip_layers,
    flux_layers,
    lora_layout,
    sd3_layers,
    unet_attention_layers,
)
from tests.fixtures.st_files import write_sparse

CASES = cases()


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bases")
    out = {name: write_sparse(root / f"{name}.safetensors", build()) for name, build in BASES.items()}
    out["sd1-unet"] = write_sparse(root / "sd1-unet.safetensors", DIFFUSION_LAYOUTS["sd1"]())
    return out


@pytest.fixture(scope="module")
def components(bases: dict[str, Path]) -> dict[str, list[Any]]:
    """Each base's components as planned for loading (built on meta), once per module."""
    return {name: header_components(path)[0] for name, path in bases.items()}


def _analysis(layout: Mapping[str, tuple[int, ...]]) -> LoraAnalysis:
    analysis = analyze_lora(KeyView({k: TensorInfo("F16", tuple(s), 0) for k, s in layout.items()}))
    assert analysis is not None
    return analysis


def _match(c: Case, components: dict[str, list[Any]], base: str | None = None) -> MatchReport:
    return match_lora(_analysis(c.layout), components[base or c.base])


def _wrong(report: MatchReport, expected: Mapping[str, Target]) -> list[str]:
    return [f"{n}: {report.matched.get(n)} != {t}" for n, t in expected.items() if report.matched.get(n) != t]


# --- every scheme matches every module onto the right weight -------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_every_module_lands_on_its_weight(name: str, components: dict[str, list[Any]]) -> None:
    c = CASES[name]
    report = _match(c, components)
    print(f"{name}: {report.counts} sliced={report.sliced} {report.by_component}")
    assert report.unmatched == []
    assert report.shape_mismatches == []
    assert _wrong(report, c.expected) == []
    assert report.matched == c.expected  # nothing extra either
    assert report.total == len(c.expected) > 0


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_shape_checks_accept_every_algorithm(algo: str, components: dict[str, list[Any]]) -> None:
    c = algorithm_case(algo)
    report = _match(c, components)
    assert report.shape_mismatches == [] and report.unmatched == []
    assert report.matched == c.expected


def test_headers_only_entry_point(bases: dict[str, Path], tmp_path: Path) -> None:
    c = CASES["sdxl/kohya"]
    lora = write_sparse(tmp_path / "sdxl_lora.safetensors", c.layout, metadata={"ss_network_dim": "8"})
    report, family, lora_family = match_lora_headers(lora, bases["sdxl"])
    assert (family, lora_family) == ("sdxl", "sdxl")
    assert report.matched == c.expected
    assert report.counts == {"total": 986, "matched": 986, "unmatched": 0, "shape_mismatches": 0}
    assert report.by_component == {
        "diffusion_model": 722,
        "text_encoder:clip-l": 72,
        "text_encoder:clip-g": 192,
    }
    js = report.to_json()
    assert js["matched"] == 986 and js["warnings"] == []
    qkv = CASES["flux/ai-toolkit"]
    lora = write_sparse(tmp_path / "flux_lora.safetensors", qkv.layout)
    report, family, lora_family = match_lora_headers(lora, bases["flux"])
    assert family == lora_family == "flux-dev"
    assert report.matched == qkv.expected and report.sliced == 19 * 6 + 38 * 4
    q = report.to_json()["matched_modules"]["transformer.single_transformer_blocks.0.proj_mlp"]
    assert q == {
        "component": "diffusion_model",
        "key": "single_blocks.0.linear1.weight",
        "offset": [0, 9216, 12288],
    }


# --- slices of fused weights, swapped halves ------------------------------------------------------


def test_fused_slices_cover_the_fused_weight_exactly(components: dict[str, list[Any]]) -> None:
    """q, k, v (and Flux's MLP input) tile qkv / linear1 with no gap and no overlap."""
    for base, pairs in (
        ("flux", flux_pairs("diffusers")),
        ("sd3.5-medium", sd3_pairs("diffusers", attn2_blocks=13)),
    ):
        index = model_key_index(*components[base][0])
        rows: dict[str, list[tuple[int, int]]] = {}
        for p in pairs:
            t = index.resolve(p.layer.path)
            assert t == p.target
            if t is not None and t.offset is not None:
                rows.setdefault(t.key, []).append((t.offset[1], t.offset[2]))
        for key, parts in rows.items():
            parts.sort()
            assert parts[0][0] == 0
            assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(parts)), key
            assert parts[-1][0] + parts[-1][1] == index.shapes[key][0], key


def test_final_adaln_layers_swap_halves(components: dict[str, list[Any]]) -> None:
    flux = model_key_index(*components["flux"][0])
    assert flux.resolve("norm_out.linear") == Target(
        "diffusion_model", "final_layer.adaLN_modulation.1.weight", swap_halves=True
    )
    assert flux.resolve("proj_out") == Target("diffusion_model", "final_layer.linear.weight")
    assert flux.resolve("x_embedder") == Target("diffusion_model", "img_in.weight")
    assert flux.resolve("time_text_embed_guidance_embedder_linear_1") == Target(
        "diffusion_model", "guidance_in.in_layer.weight"
    )
    sd3 = model_key_index(*components["sd3"][0])
    last = sd3.resolve("transformer_blocks.23.norm1_context.linear")
    assert (
        last is not None
        and last.swap_halves
        and last.key == "joint_blocks.23.context_block.adaLN_modulation.1.weight"
    )
    first = sd3.resolve("transformer_blocks.0.norm1_context.linear")
    assert first is not None and not first.swap_halves


def test_flat_names_that_could_mean_two_layers_are_not_guessed() -> None:
    shapes = {"a.b_c.weight": (4, 4), "a_b.c.weight": (4, 4), "d.e.weight": (4, 4)}
    index = model_key_index("text_encoder", "clip-l", shapes, None)
    assert index.resolve("a.b_c") == Target("text_encoder:clip-l", "a.b_c.weight")
    assert index.resolve("a_b_c") is None  # kohya-style: ambiguous, left unmatched
    assert index.resolve("d_e") == Target("text_encoder:clip-l", "d.e.weight")


def test_configs_give_the_slices_of_a_smaller_model() -> None:
    """Offsets come from the model's own widths, not from Flux-dev's."""
    cfg = FluxConfig(hidden_size=256, num_heads=2, depth=1, depth_single_blocks=1, axes_dim=(16, 56, 56))
    h = 256
    shapes = {"double_blocks.0.img_attn.qkv.weight": (3 * h, h), "single_blocks.0.linear1.weight": (7 * h, h)}
    index = model_key_index("diffusion_model", "flux-dev", shapes, cfg)
    assert index.resolve("transformer_blocks.0.attn.to_v") == Target(
        "diffusion_model", "double_blocks.0.img_attn.qkv.weight", (0, 2 * h, h)
    )
    assert index.resolve("single_transformer_blocks.0.proj_mlp") == Target(
        "diffusion_model", "single_blocks.0.linear1.weight", (0, 3 * h, 4 * h)
    )


# --- routing to text encoders --------------------------------------------------------------------


def test_text_encoders_follow_the_file_numbering(components: dict[str, list[Any]]) -> None:
    """kohya te2 on Flux is its T5 (ComfyUI's numbering); te1 on SD2 is OpenCLIP-H."""
    t5 = [Layer(f"encoder.block.{i}.layer.1.DenseReluDense.wo", 4096, 10240, 0, "te2") for i in range(24)]
    report = match_lora(_analysis(lora_layout(t5, "kohya")), components["flux"])
    assert report.by_component == {"text_encoder:t5-xxl": 24} and not report.unmatched
    report = match_lora(_analysis(lora_layout(clip_layers(1024, 24, "te1"), "kohya")), components["sd2"])
    assert report.by_component == {"text_encoder:clip-h": 144}


def test_encoder_the_model_lacks_is_reported(components: dict[str, list[Any]]) -> None:
    c = CASES["sdxl/kohya"]
    report = _match(c, components, "sd1")
    clip_g = [n for n in report.unmatched if n.startswith("lora_te2_")]
    assert len(clip_g) == 192
    assert "192 clip-g text-encoder modules skipped: the model has no clip-g text encoder" in report.warnings
    assert report.by_component.get("text_encoder:clip-l") == 72  # CLIP-L is CLIP-L on both


def test_diffusion_model_file_alone_leaves_text_encoder_modules_unmatched(
    components: dict[str, list[Any]],
) -> None:
    report = _match(CASES["sd1/kohya"], components, "sd1-unet")
    assert len(report.matched) == 199 and len(report.unmatched) == 72
    assert "72 clip-l text-encoder modules skipped: the model has no text encoder" in report.warnings


# --- negatives: reported, never raised -----------------------------------------------------------


def test_sd1_lora_on_sdxl_is_mostly_skipped_and_says_why(components: dict[str, list[Any]]) -> None:
    report = _match(CASES["sd1/kohya"], components, "sdxl")
    unet = [n for n in CASES["sd1/kohya"].expected if n.startswith("lora_unet_")]
    unet_matched = [n for n in report.matched if n.startswith("lora_unet_")]
    print(report.counts, report.warnings)
    assert len(unet_matched) < len(unet) / 3
    assert report.total == len(CASES["sd1/kohya"].expected)
    assert (
        "lora_unet_down_blocks_1_attentions_0_transformer_blocks_0_attn2_to_k: adapter makes (640, 768) "
        "but model weight is (640, 2048)"
    ) in report.shape_mismatches
    assert "lora_unet_down_blocks_0_attentions_0_proj_in" in report.unmatched  # SDXL level 0 has none


def test_flux_lora_on_sd3_matches_nothing(components: dict[str, list[Any]]) -> None:
    report = _match(CASES["flux/kohya"], components, "sd3")
    # only the text encoders are shared (CLIP-L and T5 are the same models)
    assert set(report.by_component) == {"text_encoder:clip-l", "text_encoder:t5-xxl"}
    assert len(report.unmatched) == 304


def test_slice_shape_mismatch_names_the_rows(components: dict[str, list[Any]]) -> None:
    layers = [Layer("transformer_blocks.0.attn.to_k", 2048, 3072, 0, "transformer")]
    report = match_lora(_analysis(lora_layout(layers, "diffusers", spelling="lora_A")), components["flux"])
    assert report.shape_mismatches == [
        "transformer.transformer_blocks.0.attn.to_k: adapter makes (2048, 3072) but model weight is "
        "(3072, 3072) (rows 3072:6144 of double_blocks.0.img_attn.qkv.weight)"
    ]
    assert not report.matched


def test_conv_kernel_must_match(components: dict[str, list[Any]]) -> None:
    layers = [Layer("down_blocks.0.resnets.0.conv1", 320, 320, 1, "unet")]  # 1x1 on a 3x3 conv
    report = match_lora(_analysis(lora_layout(layers, "kohya")), components["sd1"])
    assert report.shape_mismatches == [
        "lora_unet_down_blocks_0_resnets_0_conv1: adapter makes (320, 320, 1, 1) "
        "but model weight is (320, 320, 3, 3)"
    ]


def test_garbage_names_are_unmatched(components: dict[str, list[Any]]) -> None:
    layers = [
        Layer("nonsense_block_7_to_q", 320, 320),
        Layer("input_blocks.99.1.proj_in", 320, 320),
        Layer("transformer_blocks.0.attn.to_q", 3072, 3072),
    ]
    for scheme in ("kohya", "diffusers", "bare"):
        report = match_lora(_analysis(lora_layout(layers, scheme, spelling="lora_A")), components["sd1"])
        assert len(report.unmatched) == 3 and not report.matched and not report.shape_mismatches
        assert report.warnings == ["3 diffusion-model modules skipped: they name no layer of the model"]


def test_headers_refuse_what_is_not_an_adapter(bases: dict[str, Path]) -> None:
    with pytest.raises(ModelMismatchError) as err:
        match_lora_headers(bases["sd1"], bases["sdxl"])
    assert err.value.code == "wrong_kind"


def test_layer_lists_are_what_the_fixtures_promise() -> None:
    """The cases are as big as the trainers' files (a test over an empty case would pass)."""
    assert len(CASES["sd1/kohya"].expected) == 192 + 7 + 72
    assert len(CASES["sdxl/kohya"].expected) == 722 + 72 + 192
    assert len(CASES["flux/ai-toolkit"].expected) == len(flux_layers("diffusers")) == 19 * 14 + 38 * 6
    assert len(CASES["sd3/diffusers"].expected) == len(sd3_layers(24, "diffusers")) + 72 + 192 + 168
    assert len(unet_attention_layers("sd1")) == 192
    assert case("sd1", [], "kohya").expected == {}


# --- real PEFT output ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sd1-like", "sdxl-like"])
def test_real_peft_lora_maps_onto_our_unet(name: str) -> None:
    """A LoRA saved by peft from a diffusers UNet lands on the original-layout keys of our UNet:
    adding each module's up @ down at its target gives our UNet the output of the patched diffusers
    UNet (and the patch matters: without it the output differs)."""
    pytest.importorskip("diffusers")
    pytest.importorskip("peft")
    import torch

    from core.loading.convert.unet_diffusers import unet_diffusers_to_original
    from core.models.unet import UNetModel
    from tests.fixtures.keymap_peft import ALPHA, CASES, RANK, inputs, peft_unet

    torch.set_num_threads(1)
    c = CASES[name]
    ref = peft_unet(c)
    assert all(k.startswith("base_model.model.") for k in ref.lora_state)
    analysis = _analysis({k: tuple(v.shape) for k, v in ref.lora_state.items()})
    assert {m.format for m in analysis.modules} == {"peft"}
    meta = UNetModel(c.config, device="meta")
    shapes = {k: tuple(v.shape) for k, v in meta.state_dict().items()}
    report = match_lora(analysis, [("diffusion_model", "sdxl", shapes, c.config)])
    lora_modules = sum(k.endswith("lora_A.weight") for k in ref.lora_state)
    assert report.counts == {
        "total": lora_modules,
        "matched": lora_modules,
        "unmatched": 0,
        "shape_mismatches": 0,
    }
    assert all(
        t.key.startswith(("input_blocks.", "middle_block.", "output_blocks."))
        for t in report.matched.values()
    )

    state = unet_diffusers_to_original(ref.base_state, c.config)
    for m in analysis.modules:
        target = report.matched[m.name]
        down, up = ref.lora_state[m.key("down") or ""], ref.lora_state[m.key("up") or ""]
        delta = (up.flatten(1) @ down.flatten(1)) * (ALPHA / RANK)
        state[target.key] = state[target.key] + delta.reshape(state[target.key].shape)
    ours = UNetModel(c.config).eval()
    ours.load_state_dict(state, strict=True)

    args, extra, y = inputs(c.config)
    expected = ref(*args[:2], encoder_hidden_states=args[2], **extra)
    with ref.model.disable_adapter():
        plain = ref(*args[:2], encoder_hidden_states=args[2], **extra)
    with torch.no_grad():
        got = ours(*args, y)
    scale = float(expected.abs().max())
    effect = float((expected - plain).abs().max()) / scale
    err = float((got - expected).abs().max()) / scale
    print(f"{name}: {lora_modules} modules, LoRA effect {effect:.2e}, error {err:.2e}")
    assert effect > 1e-2
    assert err < 1e-4
