"""Header-only detection of diffusion models and ControlNets on real-layout sparse files.

Each test writes a real safetensors file (true full-size shapes, sparse data area) and reads it back
through ``read_tensor_index``, the path a downloaded file takes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from core.detect.catalog import REGISTRY
from core.detect.diffusion import match_controlnet, match_diffusion
from core.detect.keyview import KeyView
from core.detect.registry import Match, Registry
from core.files import read_tensor_index
from core.files.tensor_info import TensorInfo
from tests.fixtures import layouts_diffusion as L
from tests.fixtures.diffusion_layouts_mmdit import (
    flux_controlnet_diffusers,
    flux_controlnet_xlabs,
    sd3_controlnet_diffusers,
    sd35_controlnet_stability,
)
from tests.fixtures.st_files import Layout as StLayout
from tests.fixtures.st_files import write_sparse

CONTRACT_FAMILIES = [
    "sd1",
    "sd2",
    "sdxl",
    "sdxl-refiner",
    "ssd-1b",
    "segmind-vega",
    "sd3",
    "sd3.5-medium",
    "sd3.5-large",
    "flux-dev",
    "flux-schnell",
    "flux-fill",
    "chroma",
    "auraflow",
    "hunyuan-dit",
    "pixart-alpha",
    "pixart-sigma",
    "stable-cascade-c",
    "stable-cascade-b",
    "lumina2",
    "z-image",
    "hidream",
    "qwen-image",
    "wan2.1",
    "wan2.2",
    "hunyuan-video",
    "ltxv",
]

#: family -> shape-derived facts the detection must report for its original-layout fixture
EXPECTED: dict[str, dict[str, Any]] = {
    "sd1": {
        "context_dim": 768,
        "model_channels": 320,
        "adm_in_channels": None,
        "use_linear_in_transformer": False,
    },
    "sd2": {"context_dim": 1024, "use_linear_in_transformer": True, "prediction": "unknown"},
    "sdxl": {"context_dim": 2048, "adm_in_channels": 2816, "transformer_depth": (0, 0, 2, 2, 10, 10)},
    "sdxl-refiner": {"context_dim": 1280, "adm_in_channels": 2560, "model_channels": 384},
    "ssd-1b": {"transformer_depth": (0, 0, 2, 2, 4, 4), "transformer_depth_middle": -1},
    "segmind-vega": {
        "transformer_depth": (0, 0, 1, 1, 2, 2),
        "transformer_depth_output": (0, 0, 0, 1, 1, 1, 2, 2, 2),
    },
    "sd3": {"depth": 24, "hidden_size": 1536, "qk_norm": False, "pos_embed_max_size": 192},
    "sd3.5-medium": {
        "depth": 24,
        "qk_norm": True,
        "x_block_self_attn_layers": list(range(13)),
        "pos_embed_max_size": 384,
    },
    "sd3.5-large": {"depth": 38, "hidden_size": 2432, "qk_norm": True, "adm_in_channels": 2048},
    "flux-dev": {"guidance_embed": True, "depth": 19, "depth_single_blocks": 38, "in_channels": 16},
    "flux-schnell": {"guidance_embed": False, "depth": 19, "vec_in_dim": 768},
    "flux-fill": {"img_in_features": 384, "in_channels": 96, "out_channels": 16},
    "chroma": {"approximator_layers": 5, "approximator_hidden": 5120, "vec_in_dim": None},
    "auraflow": {"n_double_layers": 4, "n_layers": 36, "cond_seq_dim": 2048, "in_channels": 4},
    "hunyuan-dit": {"depth": 40, "hidden_size": 1408, "version": "1.2"},
    "pixart-alpha": {"model_max_length": 120, "micro_condition": True, "depth": 28},
    "pixart-sigma": {"model_max_length": 300, "micro_condition": False, "hidden_size": 1152},
    "stable-cascade-c": {"stage": "c", "c_cond": 2048, "c_hidden": 2048},
    "stable-cascade-b": {"stage": "b", "c_hidden": 320},
    "lumina2": {"dim": 2304, "n_layers": 26, "cap_feat_dim": 2304, "n_heads": 24},
    "z-image": {"dim": 3840, "n_layers": 30, "cap_feat_dim": 2560, "n_heads": 30, "pad_tokens": True},
    "hidream": {"num_layers": 16, "num_single_layers": 32, "num_routed_experts": 4, "hidden_size": 2560},
    "qwen-image": {"num_layers": 60, "context_dim": 3584, "in_channels": 64},
    "wan2.1": {"dim": 1536, "size": "1.3B", "model_type": "t2v", "num_layers": 30},
    "wan2.2": {"dim": 3072, "in_dim": 48, "model_type": "ti2v"},
    "hunyuan-video": {
        "depth": 20,
        "depth_single_blocks": 40,
        "guidance_embed": True,
        "patch_size": [1, 2, 2],
    },
    "ltxv": {"num_layers": 28, "hidden_size": 2048, "in_channels": 128, "size": "2B"},
}


def read_view(tmp_path: Path, layout: StLayout, name: str = "model.safetensors", **kw: Any) -> KeyView:
    path = write_sparse(tmp_path / name, layout, **kw)
    return KeyView(read_tensor_index(path).tensors)


def best(view: KeyView) -> Match:
    found = match_diffusion(view)
    assert found, "no diffusion family matched"
    return found[0]


def assert_fields(match: Match, expected: Mapping[str, Any]) -> None:
    assert {k: match.fields.get(k) for k in expected} == dict(expected)


def test_every_contract_family_is_registered() -> None:
    ids = {f.id for f in REGISTRY.group("diffusion")}
    assert set(CONTRACT_FAMILIES) <= ids
    assert set(L.DIFFUSION_LAYOUTS) == set(CONTRACT_FAMILIES)


@pytest.mark.parametrize("family", CONTRACT_FAMILIES)
def test_original_layout(tmp_path: Path, family: str) -> None:
    found = match_diffusion(read_view(tmp_path, L.DIFFUSION_LAYOUTS[family]()))
    assert [m.family for m in found][:1] == [family]
    assert found[0].layout == "original"
    assert found[0].variant is None
    assert found[0].fields["weight_dtype"] == "F16"
    assert_fields(found[0], EXPECTED[family])


@pytest.mark.parametrize("family", sorted(L.DIFFUSERS_LAYOUTS))
def test_diffusers_layout(tmp_path: Path, family: str) -> None:
    m = best(read_view(tmp_path, L.DIFFUSERS_LAYOUTS[family]()))
    assert (m.family, m.layout) == (family, "diffusers")
    assert_fields(m, EXPECTED[family])


@pytest.mark.parametrize("family", ["sd1", "sd2", "sdxl"])
@pytest.mark.parametrize("layout", ["original", "diffusers"])
@pytest.mark.parametrize(("channels", "variant"), [(9, "inpaint"), (8, "instruct-pix2pix")])
def test_inpaint_and_instruct_pix2pix(
    tmp_path: Path, family: str, layout: str, channels: int, variant: str
) -> None:
    m = best(read_view(tmp_path, L.unet(family, in_channels=channels, layout=layout)))
    assert (m.family, m.variant, m.fields["in_channels"]) == (family, variant, channels)


def test_sd2_prediction_is_left_open(tmp_path: Path) -> None:
    m = best(read_view(tmp_path, L.unet("sd2")))
    assert m.fields["prediction"] == "unknown"
    assert "v-prediction" in m.fields["ambiguous_variants"]
    assert any("v-prediction" in w for w in m.warnings)
    assert best(read_view(tmp_path, L.unet("sd1"), "b.safetensors")).fields["prediction"] == "eps"


def test_flux_depth_and_canny_are_a_dev_variant(tmp_path: Path) -> None:
    for layout in (L.flux("depth"), L.flux_diffusers("depth")):
        m = best(read_view(tmp_path, layout))
        assert (m.family, m.variant, m.fields["in_channels"]) == ("flux-dev", "control", 32)


@pytest.mark.parametrize(
    ("make", "family", "variant"),
    [
        (lambda: L.cascade_c(lite=True), "stable-cascade-c", "lite"),
        (lambda: L.cascade_b(lite=True), "stable-cascade-b", "lite"),
        (lambda: L.hunyuan_dit("1.1"), "hunyuan-dit", None),
        (lambda: L.z_image(), "z-image", None),
        (lambda: L.ltxv(dim=4096, layers=48), "ltxv", None),
        (lambda: L.hunyuan_video(guidance=False), "hunyuan-video", None),
    ],
)
def test_family_variants(tmp_path: Path, make: Any, family: str, variant: str | None) -> None:
    m = best(read_view(tmp_path, make()))
    assert (m.family, m.variant) == (family, variant)


def test_wan_14b_text_to_video_is_ambiguous(tmp_path: Path) -> None:
    found = match_diffusion(read_view(tmp_path, L.wan("14B")))
    assert [m.family for m in found] == ["wan2.1", "wan2.2"]
    assert found[0].fields["ambiguous_with"] == ["wan2.2"]
    assert found[1].fields["ambiguous_with"] == ["wan2.1"]
    assert found[0].score > found[1].score
    assert any("same shapes" in w for w in found[0].warnings)


@pytest.mark.parametrize(
    ("layout", "family", "model_type"),
    [
        (L.wan("14B", in_dim=36, image_embed=True), "wan2.1", "i2v"),  # CLIP-vision path: 2.1 only
        (L.wan("14B", in_dim=36), "wan2.2", "i2v"),  # i2v without it: Wan 2.2 A14B
        (L.wan("5B", in_dim=48, out_dim=48), "wan2.2", "ti2v"),
    ],
)
def test_wan_image_to_video(tmp_path: Path, layout: L.Layout, family: str, model_type: str) -> None:
    m = best(read_view(tmp_path, layout))
    assert (m.family, m.fields["model_type"]) == (family, model_type)


STORAGE_CASES = ["sdxl", "flux-dev", "sd3.5-large", "wan2.1", "qwen-image", "pixart-sigma"]


@pytest.mark.parametrize("family", STORAGE_CASES)
@pytest.mark.parametrize("dtype", ["F8_E4M3", "F8_E5M2"])
def test_fp8_storage(tmp_path: Path, family: str, dtype: str) -> None:
    m = best(read_view(tmp_path, L.as_fp8(L.DIFFUSION_LAYOUTS[family](), dtype)))
    assert (m.family, m.variant, m.fields["storage"], m.fields["weight_dtype"]) == (
        family,
        "fp8",
        "fp8",
        dtype,
    )


@pytest.mark.parametrize("family", STORAGE_CASES)
@pytest.mark.parametrize("style", ["comfy", "quant"])
def test_scaled_fp8_storage(tmp_path: Path, family: str, style: str) -> None:
    m = best(read_view(tmp_path, L.as_fp8_scaled(L.DIFFUSION_LAYOUTS[family](), style)))
    assert (m.family, m.variant, m.fields["storage"]) == (family, "fp8-scaled", "fp8-scaled")


@pytest.mark.parametrize("style", ["plain", "quant"])
def test_mixed_precision_with_a_wide_first_block(tmp_path: Path, style: str) -> None:
    """Mixed fp8 files keep the first and last blocks in bf16; the middle still tells."""
    layout = L.wan("1.3B")
    narrow = L.as_fp8(layout) if style == "plain" else L.as_fp8_scaled(layout, "quant")
    mixed = {k: ("BF16", s) if k.startswith("blocks.0.") else narrow[k] for k, s in layout.items()}
    mixed |= {k: v for k, v in narrow.items() if k not in layout and not k.startswith("blocks.0.")}
    m = best(read_view(tmp_path, mixed))
    assert (m.variant, m.fields["weight_dtype"]) == ("fp8" if style == "plain" else "fp8-scaled", "F8_E4M3")


def test_model_variant_comes_before_storage_variant(tmp_path: Path) -> None:
    m = best(read_view(tmp_path, L.as_fp8(L.unet("sdxl", in_channels=9))))
    assert (m.variant, m.fields["variants"]) == ("inpaint", ["inpaint", "fp8"])


def test_fp16_and_bf16_have_no_storage_variant(tmp_path: Path) -> None:
    m = best(read_view(tmp_path, L.flux("dev"), dtype="BF16"))
    assert (m.variant, m.fields["storage"], m.fields["weight_dtype"]) == (None, None, "BF16")


# -- ControlNets -------------------------------------------------------------------------------------
UNET_CONTROLNETS = [
    ("sd1", L.controlnet_ldm(L.SD1), "original"),
    ("sd2", L.controlnet_ldm(L.SD2), "original"),
    ("sdxl", L.controlnet_ldm(L.SDXL), "original"),
    ("sd1", L.controlnet_diffusers(L.SD1), "diffusers"),
    ("sdxl", L.controlnet_diffusers(L.SDXL), "diffusers"),
    ("sd1", L.with_prefix(L.controlnet_ldm(L.SD1), "control_model."), "original"),  # ControlNet 1.0 .pth
]
TRANSFORMER_CONTROLNETS = [
    ("flux-dev", flux_controlnet_xlabs(), "original"),
    ("flux-dev", flux_controlnet_diffusers(), "diffusers"),
    ("sd3", sd3_controlnet_diffusers(), "diffusers"),
    ("sd3.5-large", sd3_controlnet_diffusers("sd3.5-large", layers=19), "diffusers"),
    ("sd3.5-medium", sd3_controlnet_diffusers("sd3.5-medium", layers=6), "diffusers"),
    ("sd3.5-large", sd35_controlnet_stability(layers=2), "original"),
]


@pytest.mark.parametrize(("base", "layout", "naming"), UNET_CONTROLNETS + TRANSFORMER_CONTROLNETS)
def test_controlnets_name_their_base_and_are_not_diffusion_models(
    tmp_path: Path, base: str, layout: L.Layout, naming: str
) -> None:
    view = read_view(tmp_path, layout)
    assert match_diffusion(view) == []
    found = match_controlnet(view)
    assert found is not None
    assert (found.family, found.layout) == (base, naming)


def test_controlnet_shares_the_unet_input_side() -> None:
    """The guard is needed: without its ControlNet-only keys, a ControlNet's input side reads as a UNet."""
    cn = L.controlnet_ldm(L.SDXL)
    assert "input_blocks.0.0.weight" in cn and "middle_block.1.proj_in.weight" in cn
    assert match_controlnet(KeyView(_infos(cn)))
    assert match_controlnet(KeyView(_infos(L.unet("sdxl")))) is None


@pytest.mark.parametrize("family", CONTRACT_FAMILIES)
def test_diffusion_models_are_not_controlnets(family: str) -> None:
    assert match_controlnet(KeyView(_infos(L.DIFFUSION_LAYOUTS[family]()))) is None


def test_controlnet_storage_variant(tmp_path: Path) -> None:
    found = match_controlnet(read_view(tmp_path, L.as_fp8(L.controlnet_diffusers(L.SDXL))))
    assert found is not None and (found.family, found.variant) == ("sdxl", "fp8")


# -- purity and cost ---------------------------------------------------------------------------------
def _infos(layout: Mapping[str, tuple[int, ...]]) -> dict[str, TensorInfo]:
    return {k: TensorInfo("F16", tuple(s), 0) for k, s in layout.items()}


def test_detection_never_mutates_its_input() -> None:
    for layout in (L.unet("sdxl"), L.as_fp8_scaled(L.flux("dev")), L.controlnet_ldm(L.SD1), L.wan("14B")):
        tensors = {k: TensorInfo(*(v if isinstance(v[0], str) else ("F16", v)), 0) for k, v in layout.items()}
        before = dict(tensors)
        order = list(tensors)
        view = KeyView(tensors)
        first = match_diffusion(view)
        if first:
            first[0].fields["depth"] = "changed by the caller"
        match_controlnet(view)
        assert tensors == before and list(tensors) == order
        again = match_diffusion(view)
        assert [m.family for m in again] == [m.family for m in first]
        assert not again or again[0].fields.get("depth") != "changed by the caller"


class CountingMapping(Mapping[str, TensorInfo]):
    """A tensor index that counts how often it is scanned from start to end."""

    def __init__(self, data: dict[str, TensorInfo]) -> None:
        self.data = data
        self.scans = 0

    def __getitem__(self, key: str) -> TensorInfo:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        self.scans += 1
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __contains__(self, key: object) -> bool:
        return key in self.data


def test_a_million_keys_are_classified_without_scanning() -> None:
    filler = TensorInfo("F16", (8,), 16)
    tensors = {f"extra.{i}.weight": filler for i in range(1_000_000)}
    tensors.update(_infos(L.unet("sdxl")))
    counting = CountingMapping(tensors)
    found = match_diffusion(KeyView(counting))
    cn = match_controlnet(KeyView(counting))
    assert [m.family for m in found] == ["sdxl"] and cn is None
    assert counting.scans == 0  # every rule looks keys up; none walks the million keys


def test_a_registry_can_be_built_without_the_global_one() -> None:
    from core.detect.diffusion_families import register_diffusion_families

    own = Registry()
    register_diffusion_families(own)
    view = KeyView(_infos(L.flux("schnell")))
    assert [m.family for m in match_diffusion(view, registry=own)] == ["flux-schnell"]
    with pytest.raises(ValueError, match="registered twice"):
        register_diffusion_families(own)


def test_unrelated_files_match_nothing() -> None:
    for layout in (L.kl_vae(), L.clip_text(), L.t5_encoder(blocks=2), {"foo.weight": (3, 3)}):
        view = KeyView(_infos(layout))
        assert match_diffusion(view) == []
        assert match_controlnet(view) is None
