"""Upscale models and textual-inversion embeddings detected from real files read back from disk."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from core.detect.aux_kinds import match_embedding, match_upscale
from core.detect.encoders import match_text_encoder, match_vae
from core.detect.keyview import KeyView
from core.files import read_tensor_index
from tests.fixtures import aux_layouts as A
from tests.fixtures import layouts_encoders as L
from tests.fixtures.st_files import write_sparse


def view_of(tmp_path: Path, layout: L.Layout, *, dtype: str = "F16") -> KeyView:
    path = write_sparse(tmp_path / "model.safetensors", layout, dtype=dtype)
    return KeyView(read_tensor_index(path).tensors)


UPSCALE_CASES: list[tuple[str, Callable[[], L.Layout], str, str, dict[str, Any]]] = [
    (
        "esrgan-old-x4",
        lambda: A.esrgan_old(4),
        "esrgan",
        "original",
        {"scale": 4, "in_channels": 3, "out_channels": 3, "num_filters": 64, "num_blocks": 23},
    ),
    ("esrgan-old-x2", lambda: A.esrgan_old(2), "esrgan", "original", {"scale": 2}),
    ("esrgan-old-x1", lambda: A.esrgan_old(1), "esrgan", "original", {"scale": 1}),
    ("esrgan-old-x8", lambda: A.esrgan_old(8, nb=6), "esrgan", "original", {"scale": 8, "num_blocks": 6}),
    (
        "esrgan-new-x4",
        lambda: A.esrgan_new(),
        "esrgan",
        "basicsr",
        {"scale": 4, "in_channels": 3, "num_blocks": 23, "pixel_unshuffle": 1},
    ),
    (
        "realesrgan-x2plus",
        lambda: A.esrgan_new(unshuffle=2),
        "esrgan",
        "basicsr",
        {"scale": 2, "in_channels": 3, "pixel_unshuffle": 2},
    ),
    ("esrgan-new-x1", lambda: A.esrgan_new(unshuffle=4), "esrgan", "basicsr", {"scale": 1, "in_channels": 3}),
    (
        "srvgg-general-x4v3",
        lambda: A.srvgg_compact(4, num_conv=32),
        "realesrgan-compact",
        "original",
        {"scale": 4, "num_conv": 32, "num_filters": 64, "activation": "prelu", "in_channels": 3},
    ),
    (
        "srvgg-animevideo-v3",
        lambda: A.srvgg_compact(4, num_conv=16),
        "realesrgan-compact",
        "original",
        {"scale": 4, "num_conv": 16},
    ),
    (
        "srvgg-x2-relu",
        lambda: A.srvgg_compact(2, prelu=False),
        "realesrgan-compact",
        "original",
        {"scale": 2},
    ),
    (
        "swinir-classical-x4",
        lambda: A.swinir(4),
        "swinir",
        "original",
        {
            "scale": 4,
            "embed_dim": 180,
            "depths": [6] * 6,
            "num_heads": [6] * 6,
            "window_size": 8,
            "upsampler": "pixelshuffle",
        },
    ),
    (
        "swinir-real-x4",
        lambda: A.swinir(4, upsampler="nearest+conv"),
        "swinir",
        "original",
        {"scale": 4, "upsampler": "nearest+conv", "out_channels": 3},
    ),
    (
        "swinir-light-x2",
        lambda: A.swinir(2, embed_dim=60, depths=(6, 6, 6, 6), upsampler="pixelshuffledirect"),
        "swinir",
        "original",
        {"scale": 2, "embed_dim": 60, "depths": [6, 6, 6, 6]},
    ),
    ("swinir-denoise", lambda: A.swinir(1, upsampler="none"), "swinir", "original", {"scale": 1}),
    ("hat-x4", lambda: A.swinir(4, hat=True), "hat", "original", {"scale": 4}),
]


@pytest.mark.parametrize(
    ("make", "family", "layout", "fields"), [c[1:] for c in UPSCALE_CASES], ids=[c[0] for c in UPSCALE_CASES]
)
def test_upscaler_files(
    tmp_path: Path, make: Callable[[], L.Layout], family: str, layout: str, fields: dict[str, Any]
) -> None:
    view = view_of(tmp_path, make())
    found = match_upscale(view)
    assert found is not None
    assert (found.family, found.layout) == (family, layout)
    assert {k: found.fields[k] for k in fields} == fields
    assert match_embedding(view) is None
    assert match_text_encoder(view) == [] and match_vae(view) == []


def test_basicsr_legacy_names(tmp_path: Path) -> None:
    renames = {
        "body.": "RRDB_trunk.",
        ".rdb": ".RDB",
        "conv_body": "trunk_conv",
        "conv_up": "upconv",
        "conv_hr": "HRconv",
    }
    layout: L.Layout = {}
    for key, spec in A.esrgan_new().items():
        for old, new in renames.items():
            key = key.replace(old, new)
        layout[key] = spec
    found = match_upscale(view_of(tmp_path, layout))
    assert found is not None and found.layout == "basicsr-legacy" and found.fields["scale"] == 4


def _tiny_rrdb() -> dict[str, torch.Tensor]:
    return {k: torch.zeros(v) for k, v in A.esrgan_new(nb=1, nf=8, gc=4).items()}  # type: ignore[arg-type]


def test_real_esrgan_pickle_with_params_ema(tmp_path: Path) -> None:
    """Real-ESRGAN ships ``.pth`` pickles that wrap the weights in ``params_ema``."""
    path = tmp_path / "RealESRGAN_x4plus.pth"
    torch.save({"params_ema": _tiny_rrdb()}, path)
    found = match_upscale(KeyView(read_tensor_index(path).tensors))
    assert found is not None and found.family == "esrgan"
    assert (found.fields["scale"], found.fields["num_filters"], found.fields["num_blocks"]) == (4, 8, 1)


EMBEDDING_CASES: list[tuple[str, Callable[[], L.Layout], str, str, dict[str, Any]]] = [
    ("sd1", lambda: A.embedding_sd1(8), "sd1", "emb_params", {"vectors": 8, "width": 768}),
    ("sd1-one-vector", lambda: {"emb_params": (768,)}, "sd1", "emb_params", {"vectors": 1, "width": 768}),
    ("sd2", lambda: A.embedding_sd2(4), "sd2", "emb_params", {"vectors": 4, "width": 1024}),
    (
        "sdxl",
        lambda: A.embedding_sdxl(8),
        "sdxl",
        "clip_pair",
        {"vectors": 8, "width": 2048, "widths": {"clip_l": 768, "clip_g": 1280}},
    ),
    ("a1111-flat", lambda: A.embedding_sd1_pt(3), "sd1", "a1111", {"vectors": 3, "width": 768}),
    ("diffusers-concept", lambda: {"<cat-toy>": ("F32", (768,))}, "sd1", "diffusers", {"vectors": 1}),
]


@pytest.mark.parametrize(
    ("make", "family", "layout", "fields"),
    [c[1:] for c in EMBEDDING_CASES],
    ids=[c[0] for c in EMBEDDING_CASES],
)
def test_embedding_files(
    tmp_path: Path, make: Callable[[], L.Layout], family: str, layout: str, fields: dict[str, Any]
) -> None:
    view = view_of(tmp_path, make())
    found = match_embedding(view)
    assert found is not None
    assert (found.family, found.layout) == (family, layout)
    assert {k: found.fields[k] for k in fields} == fields
    assert match_upscale(view) is None
    assert match_text_encoder(view) == [] and match_vae(view) == []


@pytest.mark.parametrize("token", [265, torch.tensor(265)], ids=["int-token", "tensor-token"])
def test_a1111_pt_embedding_read_through_the_pickle_reader(tmp_path: Path, token: object) -> None:
    """A1111 saves ``{"string_to_token": {"*": 265}, "string_to_param": {"*": vec}, "name", "step", ...}``."""
    path = tmp_path / "style.pt"
    torch.save(
        {
            "string_to_token": {"*": token},
            "string_to_param": {"*": torch.zeros(5, 768, requires_grad=True)},
            "name": "style",
            "step": 3000,
            "sd_checkpoint": "a9263745",
            "sd_checkpoint_name": "v1-5-pruned",
        },
        path,
    )
    found = match_embedding(KeyView(read_tensor_index(path).tensors))
    assert found is not None
    assert (found.family, found.layout, found.fields["vectors"], found.fields["width"]) == (
        "sd1",
        "a1111",
        5,
        768,
    )


def test_sdxl_embedding_with_uneven_vectors_warns(tmp_path: Path) -> None:
    found = match_embedding(view_of(tmp_path, {"clip_g": (4, 1280), "clip_l": (6, 768)}))
    assert found is not None and found.family == "sdxl" and found.warnings


NOT_AUX = {
    "two-tensors": lambda: {"weight": (768, 768), "bias": (768,)},
    "emb-unknown-width": lambda: {"emb_params": (8, 512)},
    "emb-plus-extra": lambda: {"emb_params": (8, 768), "other": (8, 768)},
    "clip-l-alone": lambda: {"clip_l": (8, 768)},
    "clip-pair-wrong-widths": lambda: {"clip_l": (8, 1280), "clip_g": (8, 768)},
    "emb-too-many-vectors": lambda: {"emb_params": (1000, 768)},
    "emb-int": lambda: {"emb_params": ("I64", (8, 768))},
    "concept-3d": lambda: {"<x>": (1, 8, 768)},
    "srvgg-with-extra-key": lambda: {**A.srvgg_compact(4, num_conv=4), "head.weight": (3, 3, 1, 1)},
    "body-only-two-convs": lambda: {"body.0.weight": (64, 3, 3, 3), "body.0.bias": (64,)},
    "vae": lambda: L.vae_kl(4),
    "clip": L.clip_l_hf,
    "t5": L.t5_base,
    "unet": lambda: {
        "input_blocks.0.0.weight": (320, 4, 3, 3),
        "input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight": (320, 768),
        "out.2.weight": (4, 320, 3, 3),
    },
    "lora": lambda: {
        "lora_unet_conv_first.lora_down.weight": (8, 3, 3, 3),
        "lora_unet_conv_first.lora_up.weight": (64, 8, 1, 1),
        "lora_unet_body_0_rdb1_conv1.lora_down.weight": (8, 64, 3, 3),
        "conv_first.lora_A.weight": (8, 3, 3, 3),
    },
    "flux-like": lambda: {
        "double_blocks.0.img_attn.norm.key_norm.scale": (128,),
        "img_in.weight": (3072, 64),
        "final_layer.linear.weight": (64, 3072),
    },
}


@pytest.mark.parametrize("make", NOT_AUX.values(), ids=NOT_AUX.keys())
def test_not_an_upscaler_or_embedding(tmp_path: Path, make: Callable[[], L.Layout]) -> None:
    view = view_of(tmp_path, make())
    assert match_upscale(view) is None
    assert match_embedding(view) is None


def test_aux_matchers_never_mutate_their_input() -> None:
    for layout in (
        A.esrgan_old(4),
        A.srvgg_compact(4),
        A.swinir(4),
        A.embedding_sdxl(),
        A.embedding_sd1_pt(),
    ):
        tensors = L.tensor_infos(layout)
        before = copy.deepcopy(tensors)
        view = KeyView(tensors)
        match_upscale(view)
        match_embedding(view)
        assert tensors == before and list(tensors) == list(before)
