"""FaceID IP-Adapters told as ComfyUI_IPAdapter_plus tells them (``is_faceid``: the MLP projection
over the face embedding; LoRA keys beside the adapter's: FaceID; none: portrait; the face resampler:
FaceID Plus, v2 by the file name), detected as IP-Adapters even though most of their keys are LoRA
factors; what Loadout does not run (the SDXL portrait unnorm, Kolors' FaceID) refused in
words; the projections at real width equal diffusers' ``IPAdapterFaceIDImageProjection`` and
``IPAdapterFaceIDPlusImageProjection`` loaded from the same file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.detect.detector import detect
from core.errors import LoadoutError
from core.files import read_tensor_index
from core.loading.ip_adapter import load_ip_adapter
from tests.fixtures.st_files import write_tensors

diffusers = pytest.importorskip("diffusers")

CROSS = 768
LAYERS = 4  # attention processors 0..7: the odd ones cross-attentions


def _mlp(tokens: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    return {
        "image_proj.proj.0.weight": torch.randn(1024, 512, generator=g) / 22.6,
        "image_proj.proj.0.bias": torch.randn(1024, generator=g) * 0.1,
        "image_proj.proj.2.weight": torch.randn(tokens * CROSS, 1024, generator=g) / 32,
        "image_proj.proj.2.bias": torch.randn(tokens * CROSS, generator=g) * 0.1,
        "image_proj.norm.weight": 1 + 0.1 * torch.randn(CROSS, generator=g),
        "image_proj.norm.bias": 0.1 * torch.randn(CROSS, generator=g),
    }


def _kv(lora: bool) -> dict[str, torch.Tensor]:
    out = {}
    for n in range(2 * LAYERS):
        if n % 2:
            out[f"ip_adapter.{n}.to_k_ip.weight"] = torch.zeros(320, CROSS)
            out[f"ip_adapter.{n}.to_v_ip.weight"] = torch.zeros(320, CROSS)
        if lora:
            for proj in ("to_q", "to_k", "to_v", "to_out"):
                out[f"ip_adapter.{n}.{proj}_lora.down.weight"] = torch.zeros(128, 320)
                out[f"ip_adapter.{n}.{proj}_lora.up.weight"] = torch.zeros(320, 128)
    return out


def _plus(g: torch.Generator, width: int = CROSS) -> dict[str, torch.Tensor]:
    p = "image_proj.perceiver_resampler."
    out = {
        f"{p}proj_in.weight": torch.randn(width, 1280, generator=g) / 36,
        f"{p}proj_in.bias": 0.1 * torch.randn(width, generator=g),
        f"{p}proj_out.weight": torch.randn(width, width, generator=g) / 28,
        f"{p}proj_out.bias": 0.1 * torch.randn(width, generator=g),
        f"{p}norm_out.weight": 1 + 0.1 * torch.randn(width, generator=g),
        f"{p}norm_out.bias": 0.1 * torch.randn(width, generator=g),
    }
    for i in range(4):  # diffusers' FaceID Plus projection is 4 deep
        q = f"{p}layers.{i}."
        for n in ("0.norm1", "0.norm2", "1.0"):
            out[f"{q}{n}.weight"] = 1 + 0.1 * torch.randn(width, generator=g)
            out[f"{q}{n}.bias"] = 0.1 * torch.randn(width, generator=g)
        out[f"{q}0.to_q.weight"] = torch.randn(width, width, generator=g) / 28
        out[f"{q}0.to_kv.weight"] = torch.randn(2 * width, width, generator=g) / 28
        out[f"{q}0.to_out.weight"] = torch.randn(width, width, generator=g) / 28
        out[f"{q}1.1.weight"] = torch.randn(4 * width, width, generator=g) / 28
        out[f"{q}1.3.weight"] = torch.randn(width, 4 * width, generator=g) / 55
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("faceid_detect")
    g = torch.Generator().manual_seed(0)
    layouts = {
        "ip-adapter-faceid_sd15.safetensors": {**_mlp(4, g), **_kv(True)},
        "ip-adapter-faceid-portrait_sd15.safetensors": {**_mlp(16, g), **_kv(False)},
        "ip-adapter-faceid-plus_sd15.safetensors": {**_mlp(4, g), **_plus(g), **_kv(True)},
        "ip-adapter-faceid-plusv2_sd15.safetensors": {**_mlp(4, g), **_plus(g), **_kv(True)},
        "ip-adapter-faceid-portrait-unnorm_sdxl.safetensors": {**_mlp(16, g), **_kv(False)},
    }  # fmt: skip
    return {name: write_tensors(root / name, state) for name, state in layouts.items()}


def test_variants_detected_as_the_pack_tells_them(files: dict[str, Path]) -> None:
    expected = {
        "ip-adapter-faceid_sd15.safetensors": ("faceid", None, "face", 4),
        "ip-adapter-faceid-portrait_sd15.safetensors": ("faceid-portrait", None, "face", 16),
        "ip-adapter-faceid-plus_sd15.safetensors": ("faceid-plus", "clip-vit-h", "face+penultimate", 4),
        "ip-adapter-faceid-plusv2_sd15.safetensors": ("faceid-plusv2", "clip-vit-h", "face+penultimate", 4),
    }
    for name, (variant, encoder, embeds, tokens) in expected.items():
        det = detect(read_tensor_index(files[name]).tensors, {}, name)
        assert (det.kind, det.family, det.variant) == ("ip_adapter", "sd1", variant), name
        assert det.fields.get("encoder") == encoder and det.fields["embeds"] == embeds, name
        assert det.fields["tokens"] == tokens and det.fields["layers"] == LAYERS, name
        adapter = load_ip_adapter(files[name])
        assert (adapter.variant, adapter.encoder, adapter.embeds) == (variant, encoder, embeds)


def test_what_is_not_run_is_refused_in_words(files: dict[str, Path]) -> None:
    for name, words in (
        ("ip-adapter-faceid-portrait-unnorm_sdxl.safetensors", "unnormalised"),
    ):
        with pytest.raises(LoadoutError) as err:
            load_ip_adapter(files[name])
        assert err.value.code == "unsupported_variant" and words in err.value.what, name


def test_projections_equal_diffusers(files: dict[str, Path]) -> None:
    from diffusers import UNet2DConditionModel
    from safetensors.torch import load_file

    g = torch.Generator().manual_seed(3)
    face = torch.randn(2, 512, generator=g)
    face = face / face.norm(dim=-1, keepdim=True)
    clip = torch.randn(2, 257, 1280, generator=g)
    convert = UNet2DConditionModel._convert_ip_adapter_image_proj_to_diffusers
    for name in ("ip-adapter-faceid_sd15.safetensors", "ip-adapter-faceid-portrait_sd15.safetensors",
                 "ip-adapter-faceid-plusv2_sd15.safetensors"):  # fmt: skip
        flat = load_file(str(files[name]))
        proj = {k.removeprefix("image_proj."): v for k, v in flat.items() if k.startswith("image_proj.")}
        theirs = convert(None, proj, low_cpu_mem_usage=False).eval()  # type: ignore[arg-type]
        adapter = load_ip_adapter(files[name])
        with torch.no_grad():
            if adapter.embeds == "face":
                ours, ref = adapter.arch.project(adapter.module, face), theirs(face)
            else:
                theirs.clip_embeds, theirs.shortcut, theirs.shortcut_scale = clip[:, None], True, 1.6
                ref = theirs(face[:, None])
                ours = adapter.arch.project_face_plus(adapter.module, face, clip, 1.6, True)
        assert ours.shape == ref.shape
        torch.testing.assert_close(ours, ref, rtol=0, atol=2e-5)


def test_h94_bin_release_loads_as_the_safetensors_one(files: dict[str, Path], tmp_path: Path) -> None:
    """h94 ships the FaceID adapters as ``.bin`` (a pickled ``{"image_proj": {...}, "ip_adapter":
    {...}}``): read without running code, the same adapter as its safetensors conversion."""
    from safetensors.torch import load_file

    name = "ip-adapter-faceid-plusv2_sd15"
    flat = load_file(str(files[f"{name}.safetensors"]))
    nested: dict[str, dict[str, torch.Tensor]] = {"image_proj": {}, "ip_adapter": {}}
    for key, value in flat.items():
        head, rest = key.split(".", 1)
        nested[head][rest] = value
    torch.save(nested, tmp_path / f"{name}.bin")
    a, b = load_ip_adapter(tmp_path / f"{name}.bin"), load_ip_adapter(files[f"{name}.safetensors"])
    assert (a.variant, a.encoder, a.embeds) == (b.variant, b.encoder, b.embeds) == (
        "faceid-plusv2", "clip-vit-h", "face+penultimate"
    )  # fmt: skip
    sa, sb = a.module.state_dict(), b.module.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
