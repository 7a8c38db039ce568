"""Bad input to the loaders: each case is a clear LoadoutError naming the file and what to do.

Truncated files, hand-edited headers, components missing from a checkpoint, the wrong kind of file
(a LoRA, a VAE, a bare diffusion model, a text encoder where a checkpoint goes), GGUF, empty files.
Full-size sparse headers stand in where no data is needed; real (tiny) data where it is. The input
file must be unchanged afterwards in every case.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from core.errors import FileFormatError, LoadoutError, ModelMismatchError
from core.loading.loader import (
    inspect_for_loading,
    load_checkpoint,
    load_diffusion_model,
    load_text_encoder,
    load_vae,
)
from tests.fixtures import layouts_encoders as enc
from tests.fixtures import layouts_lora as lora
from tests.fixtures.gguf_files import write_gguf
from tests.fixtures.layouts_diffusion import DIFFUSION_LAYOUTS, kl_vae, sd1_checkpoint, unet
from tests.fixtures.st_files import write_sparse, write_tensors
from tests.fixtures.tiny_models import CHECKPOINTS, TINY_FLUX, TINY_VAE_4, checkpoint_tensors

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: as fast, spins against nothing

Layout = Mapping[str, Any]
UNET = "model.diffusion_model."


def fingerprint(path: Path) -> tuple[int, int, str]:
    """Size, mtime and a content hash (the whole file when small; header and tail of a sparse one)."""
    st = path.stat()
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        if st.st_size <= 64 << 20:
            h.update(fh.read())
        else:
            h.update(fh.read(1 << 20))
            fh.seek(-(1 << 20), os.SEEK_END)
            h.update(fh.read())
    return st.st_size, st.st_mtime_ns, h.hexdigest()


def refused(path: Path, load: Callable[[Path], object], error: type[LoadoutError], code: str) -> LoadoutError:
    """Run ``load``; it must raise ``error`` with ``code``, name the file, say what to do, and leave
    the file as it was."""
    before = fingerprint(path)
    with pytest.raises(error) as info:
        load(path)
    e = info.value
    assert e.code == code, e.message
    assert path.name in e.message
    assert e.fix and e.fix.rstrip(".").lower() in e.message.lower()
    assert fingerprint(path) == before
    return e


# --- truncated files ---------------------------------------------------------------------------------


def _truncate(path: Path, keep: float) -> Path:
    raw = path.read_bytes()
    path.write_bytes(raw[: int(len(raw) * keep)])
    return path


@pytest.mark.parametrize("keep", [0.5, 0.999])
def test_truncated_vae_file(tmp_path: Path, keep: float) -> None:
    path = _truncate(write_tensors(tmp_path / "vae-ft-mse.safetensors", TINY_VAE_4.file_state()), keep)
    e = refused(path, load_vae, FileFormatError, "truncated")
    assert "truncated" in e.message and "again" in e.message


def test_truncated_checkpoint(tmp_path: Path) -> None:
    path = _truncate(write_tensors(tmp_path / "sd15.safetensors", checkpoint_tensors("sd1")), 0.7)
    refused(path, load_checkpoint, FileFormatError, "truncated")


def test_truncated_pickle_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "sd15.ckpt"
    torch.save({"state_dict": checkpoint_tensors("sd1")}, path)
    refused(_truncate(path, 0.6), load_checkpoint, FileFormatError, "truncated")


def test_truncated_header_length(tmp_path: Path) -> None:
    path = tmp_path / "cut.safetensors"
    path.write_bytes(b"\x10\x00\x00")
    refused(path, load_checkpoint, FileFormatError, "truncated")


@pytest.mark.parametrize("name", ["empty.safetensors", "empty.ckpt"])
def test_empty_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"")
    for load in (load_checkpoint, load_vae):
        e = refused(path, load, FileFormatError, "empty_file")
        assert "0 bytes" in e.message


# --- shapes that do not match the family -------------------------------------------------------------

#: key in an SD1 checkpoint -> hand-edited shape
EDITS = {
    "unet-attention": (UNET + "middle_block.1.transformer_blocks.0.attn1.to_q.weight", (1280, 1281)),
    "unet-resnet": (UNET + "output_blocks.2.0.out_layers.3.weight", (1280, 1280, 3, 2)),
    "unet-proj-in": (UNET + "input_blocks.1.1.proj_in.weight", (320, 321, 1, 1)),
    "vae": ("first_stage_model.decoder.conv_in.weight", (512, 4, 3, 4)),
    "clip": ("cond_stage_model.transformer.text_model.encoder.layers.3.mlp.fc1.weight", (3072, 769)),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_hand_edited_shape_names_the_key(tmp_path: Path, case: str) -> None:
    key, shape = EDITS[case]
    layout = dict(sd1_checkpoint())
    layout[key] = shape
    path = write_sparse(tmp_path / "v1-5-edited.safetensors", layout)
    e = refused(path, load_checkpoint, ModelMismatchError, "layout_mismatch")
    inner = key.split(".", 2)[-1] if key.startswith(UNET) else key.partition(".")[2]
    inner = inner.removeprefix("transformer.")
    assert inner in e.message and str(shape) in e.message
    assert "wrong shape" in e.message and "check report" in e.fix


def test_hand_edited_shape_in_real_data_file(tmp_path: Path) -> None:
    tensors = checkpoint_tensors("sd1")
    key = UNET + "input_blocks.1.1.transformer_blocks.0.attn2.to_v.weight"
    tensors[key] = torch.zeros(tensors[key].shape[0], tensors[key].shape[1] + 1)
    path = write_tensors(tmp_path / "sd15-edited.safetensors", tensors)
    e = refused(path, load_checkpoint, ModelMismatchError, "layout_mismatch")
    assert "input_blocks.1.1.transformer_blocks.0.attn2.to_v.weight" in e.message
    e = refused(path, load_diffusion_model, ModelMismatchError, "layout_mismatch")
    assert "attn2.to_v.weight" in e.message


def test_hand_edited_standalone_unet(tmp_path: Path) -> None:
    layout = dict(unet("sd1"))
    layout["output_blocks.8.1.proj_out.weight"] = (640, 64, 1, 1)
    path = write_sparse(tmp_path / "unet-edited.safetensors", layout)
    e = refused(path, load_diffusion_model, ModelMismatchError, "layout_mismatch")
    assert "output_blocks.8.1.proj_out.weight" in e.message


# --- components or blocks missing from a checkpoint --------------------------------------------------


def _without(layout: Layout, prefix: str) -> dict[str, Any]:
    out = {k: v for k, v in layout.items() if not k.startswith(prefix)}
    assert len(out) < len(layout)
    return out


def test_checkpoint_without_vae_loads_what_it_has(tmp_path: Path) -> None:
    tensors = {k: v for k, v in checkpoint_tensors("sd1").items() if not k.startswith("first_stage_model.")}
    path = write_tensors(tmp_path / "sd15-novae.safetensors", tensors)
    bundle = load_checkpoint(path)
    assert bundle.vae is None
    assert bundle.diffusion_model is not None and bundle.diffusion_model.family == "sd1"
    assert [t.family for t in bundle.text_encoders] == ["clip-l"]
    refused(path, load_vae, ModelMismatchError, "wrong_kind")  # nothing to take a VAE from


def test_checkpoint_without_vae_says_so(tmp_path: Path) -> None:
    path = write_sparse(tmp_path / "sd15-novae.safetensors", _without(sd1_checkpoint(), "first_stage_model."))
    _, det = inspect_for_loading(path)
    assert any("vae" in w.lower() for w in det.warnings)


@pytest.mark.parametrize(
    ("drop", "named"),
    [
        (UNET + "middle_block.1.transformer_blocks.0.attn1.to_q.weight", "attn1.to_q.weight"),
        (UNET + "output_blocks.5.", "output_blocks.5."),
        ("first_stage_model.decoder.up.1.block.2.", "decoder.up.1.block.2."),
        ("cond_stage_model.transformer.text_model.final_layer_norm.", "final_layer_norm"),
    ],
)
def test_missing_weights_name_the_part(tmp_path: Path, drop: str, named: str) -> None:
    path = write_sparse(tmp_path / "v1-5-damaged.safetensors", _without(sd1_checkpoint(), drop))
    e = refused(path, load_checkpoint, ModelMismatchError, "layout_mismatch")
    assert "missing" in e.message and named in e.message


def test_missing_final_conv_is_a_layout_mismatch_naming_the_file(tmp_path: Path) -> None:
    path = write_sparse(tmp_path / "v1-5-no-out.safetensors", _without(sd1_checkpoint(), UNET + "out.2."))
    e = refused(path, load_checkpoint, ModelMismatchError, "layout_mismatch")
    assert "out.2.weight" in e.message


def test_missing_unet_transformer_block_is_refused(tmp_path: Path) -> None:
    path = write_sparse(
        tmp_path / "v1-5-damaged.safetensors", _without(sd1_checkpoint(), UNET + "input_blocks.4.1.")
    )
    refused(path, load_checkpoint, ModelMismatchError, "layout_mismatch")


# --- the wrong kind of file -----------------------------------------------------------------------------

#: case -> (layout, file name, words the advice must contain)
WRONG_KIND: dict[str, tuple[Callable[[], Layout], str, tuple[str, ...]]] = {
    "lora": (
        lambda: lora.lora_layout(lora.unet_attention_layers("sd1"), "kohya"),
        "detail_tweaker_lora.safetensors",
        ("is a LoRA for sd1", "LoRA stack"),
    ),
    "vae": (kl_vae, "vae-ft-mse-840000.safetensors", ("is a VAE (vae-sd)", "as the VAE beside")),
    "diffusion_model": (
        lambda: unet("sd1"),
        "v1-5-unet-only.safetensors",
        ("diffusion model (sd1)", "add a VAE and text encoders"),
    ),
    "text_encoder": (
        enc.clip_l_hf,
        "clip_l.safetensors",
        ("text encoder (clip-l)", "beside a diffusion model"),
    ),
    "t5": (enc.t5_xxl, "t5xxl_fp16.safetensors", ("text encoder (t5-xxl)", "beside a diffusion model")),
}


@pytest.mark.parametrize("case", list(WRONG_KIND))
def test_wrong_kind_passed_as_checkpoint(tmp_path: Path, case: str) -> None:
    build, name, words = WRONG_KIND[case]
    path = write_sparse(tmp_path / name, build())
    e = refused(path, load_checkpoint, ModelMismatchError, "wrong_kind")
    assert "not a checkpoint" in e.message
    for word in words:
        assert word in e.message


@pytest.mark.parametrize(
    ("case", "load", "wanted"),
    [
        ("diffusion_model", load_vae, "not a VAE"),
        ("vae", load_text_encoder, "not a text encoder"),
        ("text_encoder", load_diffusion_model, "not a diffusion model"),
        ("lora", load_diffusion_model, "not a diffusion model"),
    ],
)
def test_wrong_kind_passed_to_component_loaders(
    tmp_path: Path, case: str, load: Callable[[Path], object], wanted: str
) -> None:
    build, name, words = WRONG_KIND[case]
    path = write_sparse(tmp_path / name, build())
    e = refused(path, load, ModelMismatchError, "wrong_kind")
    assert wanted in e.message and words[-1] in e.message


def test_checkpoint_passed_to_load_vae_loads_just_the_vae(tmp_path: Path) -> None:
    path = write_tensors(tmp_path / "v1-5-tiny.safetensors", checkpoint_tensors("sd1"))
    before = fingerprint(path)
    vae = load_vae(path)
    tiny = CHECKPOINTS["sd1"]["first_stage_model."]
    assert (vae.role, vae.family, vae.prefix) == ("vae", "vae-sd", "first_stage_model.")
    state = vae.module.state_dict()
    assert state.keys() == tiny.state().keys()
    assert all(torch.equal(state[k], v) for k, v in tiny.state().items())
    for got, want in zip(tiny.forward(vae.module), tiny.forward(tiny.reference()), strict=True):
        assert torch.equal(got, want)
    assert fingerprint(path) == before


# --- formats that cannot be loaded ------------------------------------------------------------------------


@pytest.fixture
def flux_gguf(tmp_path: Path) -> Path:
    """A Flux GGUF whose matrices are IQ4_NL, a llama.cpp type Loadout does not dequantize."""
    tensors = {
        k: ("IQ4_NL", tuple(v.shape)) if v.ndim == 2 and v.shape[1] % 32 == 0 else ("F32", tuple(v.shape))
        for k, v in TINY_FLUX.state().items()
    }
    path = write_gguf(tmp_path / "flux1-dev-IQ4_NL.gguf", tensors, {"general.architecture": "flux"})
    _, det = inspect_for_loading(path)
    assert (det.kind, det.family) == ("diffusion_model", "flux-dev")
    return path


def test_gguf_with_an_unsupported_quantization_is_refused_before_reading_data(flux_gguf: Path) -> None:
    e = refused(flux_gguf, load_diffusion_model, FileFormatError, "unsupported_format")
    assert "IQ4_NL" in e.message and "Q4_K" in e.fix


def test_gguf_diffusion_model_passed_as_checkpoint_is_the_wrong_kind(flux_gguf: Path) -> None:
    refused(flux_gguf, load_checkpoint, ModelMismatchError, "wrong_kind")


# --- files larger than memory -----------------------------------------------------------------------------


def _memory_bytes() -> int:
    """RAM + swap as the kernel's overcommit heuristic counts them."""
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        info[name] = int(rest.split()[0]) * 1024
    return info["MemTotal"] + info.get("SwapTotal", 0)


def _overcommit_mode() -> str:
    try:
        return Path("/proc/sys/vm/overcommit_memory").read_text().strip()
    except OSError:
        return "unknown"


bigger_than_memory = pytest.mark.skipif(
    _overcommit_mode() not in ("0", "2"),
    reason="needs Linux with heuristic or strict overcommit (mode 0 or 2) to make a big mapping fail",
)


@bigger_than_memory
def test_unsupported_family_is_refused_before_mapping_the_file(tmp_path: Path) -> None:
    layout: dict[str, Any] = dict(DIFFUSION_LAYOUTS["hunyuan-video"]())
    layout["padding"] = ("U8", (2 * _memory_bytes(),))  # the same file on any machine: bigger than memory
    path = write_sparse(tmp_path / "hunyuan_video_720_bf16.safetensors", layout)
    e = refused(path, load_diffusion_model, ModelMismatchError, "unsupported_family")
    assert "hunyuan-video" in e.message


@bigger_than_memory
def test_checkpoint_larger_than_memory_loads(tmp_path: Path) -> None:
    layout: dict[str, Any] = dict(sd1_checkpoint(ema=False))
    layout["model_ema.padding"] = ("U8", (2 * _memory_bytes(),))  # an EMA leftover: kept lazily, never read
    path = write_sparse(tmp_path / "v1-5-with-ema.safetensors", layout)
    bundle = load_checkpoint(path)
    assert [c.family for c in bundle.components] == ["sd1", "clip-l", "vae-sd"]
    assert "model_ema.padding" in bundle.extras
