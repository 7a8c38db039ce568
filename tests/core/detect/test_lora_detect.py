"""LoRA analysis from the header alone: real-layout files in every naming scheme and algorithm,
base family from names and shapes (metadata only confirms or breaks ties), real PEFT and LyCORIS
output, and key sets that are not adapters."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import torch
from torch import nn

from core.detect.keyview import KeyView
from core.detect.lora import LoraAnalysis, analyze_lora
from core.files.safetensors import read_header
from tests.fixtures import layouts_lora as L
from tests.fixtures.st_files import write_sparse, write_tensors

Layout = dict[str, tuple[int, ...]]


def analyze(tmp_path: Path, layout: Mapping[str, tuple[int, ...]], metadata: Mapping[str, str] | None = None):
    path = write_sparse(tmp_path / "adapter.safetensors", layout, metadata=metadata)
    header = read_header(path)
    return analyze_lora(KeyView(header.tensors), header.metadata or None)


def must(result: LoraAnalysis | None) -> LoraAnalysis:
    assert result is not None
    return result


SD1 = L.unet_attention_layers("sd1")
SD1_TE = L.clip_layers(768, 12, "te1")
SD2 = L.unet_attention_layers("sd2")
SDXL_ORIG = L.unet_attention_layers("sdxl", "original")
SDXL_TE = L.clip_layers(768, 12, "te1") + L.clip_layers(1280, 32, "te2")
FLUX = L.flux_layers()
FLUX_TE = L.clip_layers(768, 12, "te1") + L.t5_layers()

DIFF_FLUX = L.flux_layers("diffusers")
SD3_DIFF = L.sd3_layers(24, "diffusers")

BUILD: dict[str, Callable[[], Layout]] = {
    "kohya-sd15": lambda: L.lora_layout(SD1 + SD1_TE, "kohya", single_te=True),
    "kohya-sd2": lambda: L.lora_layout(SD2 + L.clip_layers(1024, 23, "te1"), "kohya", single_te=True),
    "kohya-sdxl": lambda: L.lora_layout(SDXL_ORIG + SDXL_TE, "kohya"),
    "kohya-sdxl-diffusers-names": lambda: L.lora_layout(L.unet_attention_layers("sdxl"), "kohya", rank=16),
    "kohya-flux": lambda: L.lora_layout(FLUX + FLUX_TE, "kohya", rank=16),
    "kohya-sd3-medium": lambda: L.lora_layout(L.sd3_layers(24), "kohya"),
    "kohya-sd35-large": lambda: L.lora_layout(L.sd3_layers(38), "kohya"),
    "kohya-locon-sd15": lambda: L.lora_layout(SD1 + L.sd1_conv_layers(), "kohya"),
    "kohya-diff-sd15": lambda: L.lora_layout(SD1, "kohya", algo="diff"),
    "kohya-lokr-sdxl": lambda: L.lora_layout(L.unet_attention_layers("sdxl"), "kohya", algo="lokr", rank=8),
    "diffusers-sd15": lambda: L.lora_layout(SD1 + SD1_TE, "diffusers", rank=4, spelling="lora.down"),
    "diffusers-sdxl-linear-layer": lambda: L.lora_layout(
        L.unet_attention_layers("sdxl") + SDXL_TE, "diffusers", spelling="lora_linear_layer"
    ),
    "diffusers-old-processor-sd15": lambda: L.old_diffusers_layout(SD1),
    "diffusers-flux-aitoolkit": lambda: L.lora_layout(DIFF_FLUX, "diffusers", rank=16, spelling="lora_A"),
    "peft-dora-sd15": lambda: L.lora_layout(SD1, "peft", algo="dora", rank=8, spelling="lora_A"),
    "peft-bare-sd3": lambda: L.lora_layout(SD3_DIFF, "bare", rank=4, spelling="lora_A"),
    "lycoris-loha-sd15": lambda: L.lora_layout(SD1, "lycoris", algo="loha", rank=8),
    "comfyui-glora-sdxl": lambda: L.lora_layout(SDXL_ORIG, "comfyui", algo="glora", rank=4),
    "comfyui-oft-flux": lambda: L.lora_layout(FLUX, "comfyui", algo="oft"),
    "comfyui-boft-flux": lambda: L.lora_layout(FLUX, "comfyui", algo="boft"),
    "onetrainer-sd35-medium": lambda: L.lora_layout(
        L.sd3_layers(24, "diffusers", attn2_blocks=13), "onetrainer"
    ),
    "xlabs-flux": L.xlabs_flux_layout,
    "mixed-flux": lambda: (
        L.lora_layout(DIFF_FLUX, "diffusers", rank=16, spelling="lora_A")
        | L.lora_layout(L.clip_layers(768, 12, "te1"), "kohya", rank=16)
    ),
}

# id: format, algorithms ("+"-joined), rank, modules, diffusion_model targets, text_encoder targets, base
EXPECT: dict[str, tuple[str, str, int | None, int, int, int, str]] = {
    "kohya-sd15": ("kohya", "lora", 32, 264, 192, 72, "sd1"),
    "kohya-sd2": ("kohya", "lora", 32, 330, 192, 138, "sd2"),
    "kohya-sdxl": ("kohya", "lora", 32, 986, 722, 264, "sdxl"),
    "kohya-sdxl-diffusers-names": ("kohya", "lora", 16, 722, 722, 0, "sdxl"),
    "kohya-flux": ("kohya", "lora", 16, 544, 304, 240, "flux-dev"),
    "kohya-sd3-medium": ("kohya", "lora", 32, 189, 189, 0, "sd3"),
    "kohya-sd35-large": ("kohya", "lora", 32, 301, 301, 0, "sd3.5-large"),
    "kohya-locon-sd15": ("kohya", "locon+lora", 32, 199, 199, 0, "sd1"),
    "kohya-diff-sd15": ("kohya", "diff", None, 192, 192, 0, "sd1"),
    "kohya-lokr-sdxl": ("kohya", "lokr", 8, 722, 722, 0, "sdxl"),
    "diffusers-sd15": ("diffusers", "lora", 4, 264, 192, 72, "sd1"),
    "diffusers-sdxl-linear-layer": ("diffusers", "lora", 32, 986, 722, 264, "sdxl"),
    "diffusers-old-processor-sd15": ("diffusers", "lora", 4, 128, 128, 0, "sd1"),
    "diffusers-flux-aitoolkit": ("diffusers", "lora", 16, 494, 494, 0, "flux-dev"),
    "peft-dora-sd15": ("peft", "dora+lora", 8, 192, 192, 0, "sd1"),
    "peft-bare-sd3": ("peft", "lora", 4, 262, 262, 0, "sd3"),
    "lycoris-loha-sd15": ("lycoris", "loha", 8, 192, 192, 0, "sd1"),
    "comfyui-glora-sdxl": ("comfyui", "glora", 4, 722, 722, 0, "sdxl"),
    "comfyui-oft-flux": ("comfyui", "oft", None, 304, 304, 0, "flux-dev"),
    "comfyui-boft-flux": ("comfyui", "boft", None, 304, 304, 0, "flux-dev"),
    "onetrainer-sd35-medium": ("onetrainer", "lora", 32, 314, 314, 0, "sd3.5-medium"),
    "xlabs-flux": ("xlabs", "lora", 16, 76, 76, 0, "flux-dev"),
    "mixed-flux": ("mixed", "lora", 16, 566, 494, 72, "flux-dev"),
}


@pytest.mark.parametrize("case", list(EXPECT))
def test_real_layouts_in_every_format(tmp_path: Path, case: str) -> None:
    fmt, algos, rank, modules, dm, te, base = EXPECT[case]
    a = must(analyze(tmp_path, BUILD[case]()))
    assert a.summary.format == fmt
    assert a.summary.algorithms == tuple(algos.split("+"))
    assert a.summary.rank == rank
    assert a.summary.modules == modules
    assert a.summary.targets == {"diffusion_model": dm, "text_encoder": te}
    assert a.base_family == base, a.base_evidence
    assert a.base_evidence
    assert a.summary.to_json()["targets"] == {"diffusion_model": dm, "text_encoder": te}


@pytest.mark.parametrize(
    ("layers", "scheme"),
    [
        (SD1 + SD1_TE, "kohya"),
        (SDXL_ORIG + SDXL_TE, "kohya"),
        (FLUX + FLUX_TE, "kohya"),
        (L.sd3_layers(24), "kohya"),
        (L.flux_layers("diffusers"), "onetrainer"),
        (SDXL_ORIG, "lycoris"),
    ],
)
def test_underscored_names_come_back_as_the_model_paths(
    tmp_path: Path, layers: list[L.Layer], scheme: str
) -> None:
    a = must(analyze(tmp_path, L.lora_layout(layers, scheme)))
    assert sorted(m.path for m in a.modules) == sorted(layer.path for layer in layers)
    for m in a.modules:
        assert m.name.endswith(m.flat_path)


def test_sd15_module_records_carry_what_patching_needs(tmp_path: Path) -> None:
    a = must(analyze(tmp_path, L.lora_layout(SD1 + SD1_TE, "kohya", single_te=True, rank=16)))
    by_name = {m.name: m for m in a.modules}
    proj = by_name["lora_unet_down_blocks_0_attentions_0_proj_in"]
    assert (proj.path, proj.role, proj.algorithm, proj.rank) == (
        "down_blocks.0.attentions.0.proj_in",
        "diffusion_model",
        "lora",
        16,
    )
    assert (proj.conv, proj.kernel, proj.out_features, proj.in_features) == (True, (1, 1), 320, 320)
    assert proj.has_alpha and not proj.has_dora_scale
    assert proj.key("down") == "lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight"
    assert proj.key("alpha") == "lora_unet_down_blocks_0_attentions_0_proj_in.alpha"
    k = by_name["lora_unet_up_blocks_3_attentions_2_transformer_blocks_0_attn2_to_k"]
    assert (k.in_features, k.out_features, k.conv) == (768, 320, False)
    te = by_name["lora_te_text_model_encoder_layers_11_mlp_fc1"]
    assert (te.path, te.role, te.encoder, te.encoder_id) == (
        "text_model.encoder.layers.11.mlp.fc1",
        "text_encoder",
        1,
        "clip-l",
    )
    assert a.layout == "diffusers"
    assert a.warnings == ()


def test_text_encoder_ids_follow_the_widths(tmp_path: Path) -> None:
    sdxl = must(analyze(tmp_path, L.lora_layout(SDXL_ORIG + SDXL_TE, "kohya")))
    assert {(m.encoder, m.encoder_id) for m in sdxl.modules if m.role == "text_encoder"} == {
        (1, "clip-l"),
        (2, "clip-g"),
    }
    assert sdxl.layout == "original"
    flux = must(analyze(tmp_path, L.lora_layout(FLUX + FLUX_TE, "kohya")))
    assert {(m.encoder, m.encoder_id) for m in flux.modules if m.role == "text_encoder"} == {
        (1, "clip-l"),
        (3, "t5-xxl"),
    }
    sd2 = must(
        analyze(tmp_path, L.lora_layout(SD2 + L.clip_layers(1024, 23, "te1"), "kohya", single_te=True))
    )
    assert {m.encoder_id for m in sd2.modules if m.role == "text_encoder"} == {"clip-h"}


def test_flux_dev_and_schnell_share_shapes_and_metadata_breaks_the_tie(tmp_path: Path) -> None:
    layout = L.lora_layout(FLUX, "kohya")
    plain = must(analyze(tmp_path, layout))
    assert plain.base_family == "flux-dev"
    assert any("schnell" in w for w in plain.warnings)
    generic = must(analyze(tmp_path, layout, {"ss_base_model_version": "flux1"}))
    assert generic.base_family == "flux-dev"  # "flux1" names the line, not dev: the warning stays
    assert any("schnell" in w for w in generic.warnings)
    schnell = must(analyze(tmp_path, layout, {"modelspec.architecture": "flux-1-schnell/lora"}))
    assert schnell.base_family == "flux-schnell"
    assert "metadata picks" in schnell.base_evidence and "flux-1-schnell" in schnell.base_evidence
    assert not any("schnell" in w for w in schnell.warnings)


def test_metadata_confirms_but_never_overrules_the_shapes(tmp_path: Path) -> None:
    layout = L.lora_layout(SDXL_ORIG, "kohya")
    agree = must(analyze(tmp_path, layout, {"ss_base_model_version": "sdxl_base_v1-0"}))
    assert agree.base_family == "sdxl" and "metadata agrees" in agree.base_evidence
    wrong = must(analyze(tmp_path, layout, {"ss_base_model_version": "sd_v1", "ss_v2": "False"}))
    assert wrong.base_family == "sdxl"
    assert any("metadata says sd1" in w for w in wrong.warnings)


def _without(layers: list[L.Layer], *needles: str) -> list[L.Layer]:
    return [x for x in layers if not any(n in x.path for n in needles)]


def test_sd1_sd2_sdxl_without_cross_attention_layers(tmp_path: Path) -> None:
    # Projections decide SD1 (1x1 conv) vs SD2 (linear); depth > 1 decides SDXL.
    sd1 = must(analyze(tmp_path, L.lora_layout(_without(SD1, "attn2"), "kohya")))
    assert sd1.base_family == "sd1" and "1x1 convolution" in sd1.base_evidence
    sd2 = must(analyze(tmp_path, L.lora_layout(_without(SD2, "attn2"), "kohya")))
    assert sd2.base_family == "sd2" and "linear" in sd2.base_evidence
    xl = must(analyze(tmp_path, L.lora_layout(_without(SDXL_ORIG, "attn2", "proj_"), "kohya")))
    assert xl.base_family == "sdxl" and "deeper than one block" in xl.base_evidence
    # attn1 only, SD2 shapes: nothing tells SD1 from SD2 -> sd1 with a warning; ss_v2 breaks the tie.
    attn1 = L.lora_layout(_without(SD2, "attn2", "proj_", ".ff."), "kohya")
    unsure = must(analyze(tmp_path, attn1))
    assert unsure.base_family == "sd1" and any("SD2" in w for w in unsure.warnings)
    projections = [x for x in SDXL_ORIG if x.path.endswith(("proj_in", "proj_out"))]
    proj_only = must(analyze(tmp_path, L.lora_layout(projections, "kohya")))
    assert proj_only.base_family == "sdxl" and any("SD2 and SDXL" in w for w in proj_only.warnings)
    with_te = must(analyze(tmp_path, L.lora_layout(projections + SDXL_TE, "kohya")))
    assert with_te.base_family == "sdxl" and "CLIP-G" in with_te.base_evidence and with_te.warnings == ()
    tied = must(analyze(tmp_path, attn1, {"ss_v2": "True"}))
    assert tied.base_family == "sd2" and "ss_v2" in tied.base_evidence
    assert not any("assuming sd1" in w for w in tied.warnings)


def test_text_encoder_only_loras(tmp_path: Path) -> None:
    assert must(analyze(tmp_path, L.lora_layout(SDXL_TE, "kohya"))).base_family == "sdxl"
    assert must(analyze(tmp_path, L.lora_layout(FLUX_TE, "kohya"))).base_family == "flux-dev"
    sd3_te = SDXL_TE + L.t5_layers(blocks=2)
    assert must(analyze(tmp_path, L.lora_layout(sd3_te, "kohya"))).base_family == "sd3"
    sd2 = must(analyze(tmp_path, L.lora_layout(L.clip_layers(1024, 23, "te1"), "kohya", single_te=True)))
    assert sd2.base_family == "sd2"
    assert sd2.summary.targets == {"diffusion_model": 0, "text_encoder": 138}


def test_video_and_other_dit_families(tmp_path: Path) -> None:
    wan = [
        L.Layer(f"blocks.{i}.{p}", 5120, 5120)
        for i in range(40)
        for p in ("self_attn.q", "self_attn.k", "cross_attn.q", "ffn.0")
    ]
    wan_a = must(analyze(tmp_path, L.lora_layout(wan, "comfyui", spelling="lora_A")))
    assert wan_a.base_family == "wan2.1" and any("2.2" in w for w in wan_a.warnings)
    wan22 = must(analyze(tmp_path, L.lora_layout(wan, "kohya"), {"ss_base_model_version": "wan2.2_t2v"}))
    assert wan22.base_family == "wan2.2"
    hv = [L.Layer(f"double_blocks.{i}.img_mlp.fc1", 12288, 3072) for i in range(20)]
    assert must(analyze(tmp_path, L.lora_layout(hv, "kohya"))).base_family == "hunyuan-video"
    qwen = [
        L.Layer(f"transformer_blocks.{i}.{p}", 3072, 3072)
        for i in range(60)
        for p in ("attn.to_q", "img_mlp.net.2")
    ]
    assert (
        must(analyze(tmp_path, L.lora_layout(qwen, "diffusers", spelling="lora_A"))).base_family
        == "qwen-image"
    )
    unknown = [L.Layer(f"blocks.{i}.weird.proj", 64, 64) for i in range(4)]
    nothing = must(analyze(tmp_path, L.lora_layout(unknown, "kohya")))
    assert nothing.base_family is None
    meta_only = must(
        analyze(
            tmp_path,
            L.lora_layout(unknown, "kohya"),
            {"modelspec.architecture": "stable-diffusion-xl-v1-base/lora"},
        )
    )
    assert meta_only.base_family == "sdxl" and any("metadata alone" in w for w in meta_only.warnings)


def test_incomplete_modules_and_stray_keys_are_reported(tmp_path: Path) -> None:
    layout = L.lora_layout(SD1, "kohya")
    layout["lora_unet_extra_module.lora_down.weight"] = (4, 320)  # no lora_up
    layout["bundle_emb.myconcept.string_to_param.*"] = (2, 768)  # kohya pivotal-tuning embedding
    a = must(analyze(tmp_path, layout))
    assert a.summary.modules == 192
    assert any("incomplete" in w and "lora_unet_extra_module" in w for w in a.warnings)
    assert any("not adapter weights" in w for w in a.warnings)


# Not adapters ------------------------------------------------------------------------------------


def _checkpoint_keys(layers: list[L.Layer], prefix: str) -> Layout:
    out: Layout = {}
    for x in layers:
        out[f"{prefix}{x.path}.weight"] = (x.out, x.inp, *((x.kernel, x.kernel) if x.kernel else ()))
        out[f"{prefix}{x.path}.bias"] = (x.out,)
    return out


@pytest.mark.parametrize(
    "layout",
    [
        _checkpoint_keys(L.unet_attention_layers("sd1", "original"), "model.diffusion_model.")
        | _checkpoint_keys(SD1_TE, "cond_stage_model.transformer.")
        | {"first_stage_model.decoder.conv_in.weight": (512, 4, 3, 3), "alphas_cumprod": (1000,)},
        _checkpoint_keys(L.unet_attention_layers("sdxl"), ""),
        _checkpoint_keys(FLUX, "") | {"double_blocks.0.img_attn.norm.key_norm.scale": (128,)},
        {"emb_params": (4, 768)},
        {"string_to_param.*": (2, 768), "string_to_token.*": (1,)},
    ],
    ids=["sd15-checkpoint", "sdxl-unet-diffusers", "flux-transformer", "embedding", "a1111-embedding"],
)
def test_model_files_are_not_adapters(tmp_path: Path, layout: Layout) -> None:
    assert analyze(tmp_path, layout) is None


def test_empty_key_set_is_not_an_adapter() -> None:
    assert analyze_lora(KeyView({})) is None


# Real library output ---------------------------------------------------------------------------


def _tree(layers: Mapping[str, nn.Module]) -> nn.Module:
    """A module whose named_modules() are exactly these dotted (diffusers) paths."""
    root = nn.Module()
    for path, layer in layers.items():
        node = root
        *parents, last = path.split(".")
        for seg in parents:
            if not hasattr(node, seg):
                node.add_module(seg, nn.Module())
            node = getattr(node, seg)
        node.add_module(last, layer)
    return root


def _tiny_unet() -> nn.Module:
    b = "down_blocks.0.attentions.0"
    return _tree(
        {
            f"{b}.proj_in": nn.Conv2d(32, 32, 1),
            f"{b}.transformer_blocks.0.attn1.to_q": nn.Linear(32, 32, bias=False),
            f"{b}.transformer_blocks.0.attn2.to_k": nn.Linear(768, 32, bias=False),
            f"{b}.transformer_blocks.0.attn2.to_v": nn.Linear(768, 32, bias=False),
            "down_blocks.0.resnets.0.conv1": nn.Conv2d(32, 32, 3, padding=1),
        }
    )


@pytest.mark.parametrize("dora", [False, True])
def test_real_peft_lora_file(tmp_path: Path, dora: bool) -> None:
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    targets = ["proj_in", "to_q", "to_k", "to_v"]
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets, use_dora=dora)
    model = peft.get_peft_model(_tiny_unet(), cfg)
    state = peft.get_peft_model_state_dict(model)
    path = write_tensors(tmp_path / "peft.safetensors", state)
    a = must(analyze_lora(KeyView(read_header(path).tensors)))
    assert a.summary.format == "peft"
    assert a.summary.algorithms == (("dora", "lora") if dora else ("lora",))
    assert (a.summary.rank, a.summary.modules) == (4, 4)
    assert a.base_family == "sd1"  # attn2.to_k reads 768-wide features
    wanted = {n for n, mod in _tiny_unet().named_modules() if n.rsplit(".", 1)[-1] in targets}
    assert {m.path for m in a.modules} == wanted
    assert all(m.has_dora_scale == dora for m in a.modules)


def test_real_peft_bare_keys(tmp_path: Path) -> None:
    peft = pytest.importorskip("peft")
    model = peft.inject_adapter_in_model(peft.LoraConfig(r=2, target_modules=["to_k", "to_v"]), _tiny_unet())
    path = write_tensors(tmp_path / "bare.safetensors", peft.get_peft_model_state_dict(model))
    a = must(analyze_lora(KeyView(read_header(path).tensors)))
    assert (a.summary.format, a.summary.rank, a.summary.modules) == ("peft", 2, 2)
    assert {m.name for m in a.modules} == {
        "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k",
        "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_v",
    }


@pytest.mark.parametrize(
    ("algo", "expected"), [("lora", ("locon", "lora")), ("loha", ("loha",)), ("lokr", ("lokr",))]
)
def test_real_lycoris_file(tmp_path: Path, algo: str, expected: tuple[str, ...]) -> None:
    lycoris = pytest.importorskip("lycoris")
    logging.getLogger("LyCORIS").setLevel(logging.ERROR)
    torch.manual_seed(0)
    module = _tiny_unet()
    net = lycoris.create_lycoris(
        module, 1.0, linear_dim=8, linear_alpha=4, algo=algo, conv_dim=4, conv_alpha=2
    )
    net.apply_to()
    path = tmp_path / f"{algo}.safetensors"
    net.save_weights(str(path), torch.float16, {"ss_network_module": "lycoris.kohya"})
    header = read_header(path)
    a = must(analyze_lora(KeyView(header.tensors), header.metadata))
    assert a.summary.format == "lycoris"
    assert a.summary.algorithms == expected
    assert a.summary.modules == 5
    layers = dict(module.named_modules())
    for m in a.modules:
        real = layers[m.path]  # the underscored lycoris_ name maps back onto the real module path
        if isinstance(real, nn.Linear):
            assert (m.out_features, m.in_features) == (real.out_features, real.in_features)
            assert m.rank in (8, None)
    if algo != "lokr":
        assert a.summary.rank == 8  # three linear modules at rank 8, two convolutions at rank 4
    assert a.base_family == "sd1"
