"""Splitting all-in-one checkpoints into component slots, on real-layout sparse files."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.detect.checkpoint import Slot, split_components
from core.detect.diffusion import match_diffusion
from core.detect.keyview import KeyView
from core.files import read_tensor_index
from core.files.tensor_info import TensorInfo
from tests.fixtures import layouts_diffusion as L
from tests.fixtures.st_files import Layout as StLayout
from tests.fixtures.st_files import write_sparse

DIFF, VAE, TE = "diffusion_model", "vae", "text_encoder"

CHECKPOINTS: dict[str, tuple[L.Layout, str, list[Slot]]] = {
    "sd1": (
        L.sd1_checkpoint(),
        "sd1",
        [
            Slot(DIFF, "model.diffusion_model."),
            Slot(VAE, "first_stage_model."),
            Slot(TE, "cond_stage_model.transformer.", "clip-l"),
        ],
    ),
    "sd2": (
        L.sd2_checkpoint(),
        "sd2",
        [
            Slot(DIFF, "model.diffusion_model."),
            Slot(VAE, "first_stage_model."),
            Slot(TE, "cond_stage_model.model.", "clip-h"),
        ],
    ),
    "sdxl": (
        L.sdxl_checkpoint(),
        "sdxl",
        [
            Slot(DIFF, "model.diffusion_model."),
            Slot(VAE, "first_stage_model."),
            Slot(TE, "conditioner.embedders.0.transformer.", "clip-l"),
            Slot(TE, "conditioner.embedders.1.model.", "clip-g"),
        ],
    ),
    "sdxl-refiner": (
        L.sdxl_refiner_checkpoint(),
        "sdxl-refiner",
        [
            Slot(DIFF, "model.diffusion_model."),
            Slot(VAE, "first_stage_model."),
            Slot(TE, "conditioner.embedders.0.model.", "clip-g"),
        ],
    ),
    "sd3": (
        L.sd3_checkpoint(),
        "sd3",
        [
            Slot(DIFF, "model.diffusion_model."),
            Slot(VAE, "first_stage_model."),
            Slot(TE, "text_encoders.clip_l.transformer.", "clip-l"),
            Slot(TE, "text_encoders.clip_g.transformer.", "clip-g"),
            Slot(TE, "text_encoders.t5xxl.transformer.", "t5-xxl"),
        ],
    ),
    "flux": (
        L.flux_checkpoint(),
        "flux-dev",
        [
            Slot(DIFF, "model.diffusion_model."),
            Slot(VAE, "vae."),
            Slot(TE, "text_encoders.clip_l.transformer.", "clip-l"),
            Slot(TE, "text_encoders.t5xxl.transformer.", "t5-xxl"),
        ],
    ),
}


def read_view(tmp_path: Path, layout: StLayout) -> KeyView:
    return KeyView(read_tensor_index(write_sparse(tmp_path / "checkpoint.safetensors", layout)).tensors)


@pytest.mark.parametrize("name", sorted(CHECKPOINTS))
def test_all_in_one_checkpoints(tmp_path: Path, name: str) -> None:
    layout, family, expected = CHECKPOINTS[name]
    view = read_view(tmp_path, layout)
    slots = split_components(view)
    assert slots == expected
    diffusion = match_diffusion(slots[0].view(view))
    assert [m.family for m in diffusion][:1] == [family]
    # every tensor of a component is in exactly one slot; what is left is scheduler buffers, EMA and
    # the logit_scale of ComfyUI's text-encoder wrapper
    leftover = [k for k in view if not any(s.owns(k) for s in slots)]
    assert sum(len(s.view(view)) for s in slots) + len(leftover) == len(view)
    assert all(k.startswith(LDM_LEFTOVERS) or k.endswith(".logit_scale") for k in leftover), leftover


LDM_LEFTOVERS = ("model_ema.", "logvar", "betas", "alphas_cumprod", "log_one_minus", "posterior_", "sqrt_")


def test_component_sizes_of_sdxl(tmp_path: Path) -> None:
    view = read_view(tmp_path, L.sdxl_checkpoint())
    sizes = {s.prefix: len(s.view(view)) for s in split_components(view)}
    assert sizes == {
        "model.diffusion_model.": 1680,
        "first_stage_model.": 248,
        "conditioner.embedders.0.transformer.": 197,
        "conditioner.embedders.1.model.": 390,
    }
    assert sum(sizes.values()) == len(view) == 2515


def test_sd3_without_t5_has_no_t5_slot(tmp_path: Path) -> None:
    slots = split_components(read_view(tmp_path, L.sd3_checkpoint(t5=False)))
    assert [s.prefix for s in slots] == [
        "model.diffusion_model.",
        "first_stage_model.",
        "text_encoders.clip_l.transformer.",
        "text_encoders.clip_g.transformer.",
    ]


def _view(layout: L.Layout) -> KeyView:
    return KeyView({k: TensorInfo("F16", s, 0) for k, s in layout.items()})


def test_bare_diffusion_model_is_one_slot() -> None:
    view = _view(L.flux("dev"))
    assert split_components(view) == [Slot(DIFF, "", exclude=split_components(view)[0].exclude)]
    assert len(split_components(view)[0].view(view)) == 780


def test_bare_diffusion_beside_prefixed_parts() -> None:
    view = _view(L.flux("schnell") | L.with_prefix(L.kl_vae(16, quant_conv=False), "vae."))
    slots = split_components(view)
    assert [(s.role, s.prefix) for s in slots] == [(DIFF, ""), (VAE, "vae.")]
    assert "vae." in slots[0].exclude
    assert len(slots[0].view(view)) == 776  # the VAE's keys are not the diffusion model's


def test_auraflow_under_model_prefix() -> None:
    view = _view(
        L.with_prefix(L.auraflow(), "model.")
        | L.with_prefix(L.t5_encoder(2048, 5120, 2, 32), "text_encoders.pile_t5xl.transformer.")
    )
    slots = split_components(view)
    assert slots == [Slot(DIFF, "model."), Slot(TE, "text_encoders.pile_t5xl.transformer.", None)]
    assert match_diffusion(slots[0].view(view))[0].family == "auraflow"


def test_ltxv_with_its_vae() -> None:
    view = _view(
        L.with_prefix(L.ltxv(), "model.diffusion_model.")
        | {"vae.decoder.conv_in.conv.weight": (1024, 128, 3, 3, 3)}
    )
    assert split_components(view) == [Slot(DIFF, "model.diffusion_model."), Slot(VAE, "vae.")]


def test_leftovers_and_standalone_parts_are_not_components() -> None:
    assert split_components(_view(L.kl_vae())) == []  # a standalone VAE is not an all-in-one file
    assert split_components(_view({"alphas_cumprod": (1000,), "model_ema.decay": ()})) == []
    assert split_components(_view(L.with_prefix(L.kl_vae(), "first_stage_model."))) == [
        Slot(VAE, "first_stage_model.")
    ]


def test_empty_prefixes_are_not_returned() -> None:
    slots = split_components(_view(L.with_prefix(L.unet("sd1"), "model.diffusion_model.")))
    assert slots == [Slot(DIFF, "model.diffusion_model.")]


def test_split_never_mutates_its_input() -> None:
    tensors = {k: TensorInfo("F16", s, 0) for k, s in L.sd1_checkpoint().items()}
    before, order = dict(tensors), list(tensors)
    view = KeyView(tensors)
    for slot in split_components(view):
        slot.view(view)
    assert tensors == before and list(tensors) == order
