"""InstantX's Qwen-Image ControlNet files as released (diffusers' names: the union net, and the
inpainting net whose hint embedder takes a mask beside the latent) are told apart by ``inspect``,
load through the package loader, fit every Qwen-Image model and no other, and a damaged one is
refused in words."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.archs.qwen_image.blockwise import QwenBlockwiseControlNet
from core.archs.qwen_image.controlnet import QwenImageControlNet
from core.detect.catalog import controlnet_fits
from core.errors import LoadoutError, ModelMismatchError
from core.generate.controlnet import check_fits
from core.inspect import inspect_file
from core.loading.controlnet import load_controlnet
from core.models.qwen_image import QwenImageConfig
from tests.fixtures.st_files import write_tensors


def _file(folder: Path, name: str, extra: int) -> tuple[Path, dict[str, torch.Tensor]]:
    cfg = QwenImageConfig(dim=128, n_layers=2, n_heads=1, mlp_hidden=256, context_dim=3584)
    gen = torch.Generator().manual_seed(extra)
    state = {
        k: torch.randn(v.shape, generator=gen, dtype=torch.bfloat16)
        for k, v in QwenImageControlNet(cfg, extra, device="meta").state_dict().items()
    }
    return write_tensors(folder / name, state), state


@pytest.mark.parametrize(("extra", "variant"), [(0, None), (1, "inpaint")])
def test_inspect_names_and_the_loader_loads_it(tmp_path: Path, extra: int, variant: str | None) -> None:
    path, state = _file(tmp_path, "Qwen-Image-InstantX-ControlNet.safetensors", extra)
    rec = inspect_file(path).to_json()
    assert (rec["kind"], rec["family"], rec["layout"]) == ("controlnet", "qwen-image", "diffusers")
    assert (rec["variant"] if rec["variant"] == "inpaint" else None) == variant
    net = load_controlnet(path)
    assert isinstance(net.module, QwenImageControlNet)
    assert net.module.mask_hint is bool(extra) and net.module.hint_space == "latent"
    assert torch.equal(net.module.controlnet_blocks[1].weight, state["controlnet_blocks.1.weight"])
    for family in ("qwen-image", "qwen-image-edit", "qwen-image-edit-2511"):
        check_fits(net, family)  # the Edit models too, as ComfyUI applies them
    with pytest.raises(ModelMismatchError, match="for qwen-image, and the model is flux-dev"):
        check_fits(net, "flux-dev")
    assert not controlnet_fits("qwen-image", "sdxl") and controlnet_fits("sdxl", "sdxl")


def test_a_damaged_file_is_refused_in_words(tmp_path: Path) -> None:
    _, state = _file(tmp_path, "whole.safetensors", 0)
    del state["controlnet_blocks.1.weight"]
    with pytest.raises(LoadoutError) as err:
        load_controlnet(write_tensors(tmp_path / "cut.safetensors", state))
    assert err.value.code == "layout_mismatch"
    assert "Qwen" in err.value.what or "qwen" in err.value.what


@pytest.mark.parametrize(("extra", "variant"), [(0, None), (1, "inpaint")])
def test_blockwise_nets_are_told_apart_and_load(tmp_path: Path, extra: int, variant: str | None) -> None:
    """DiffSynth's blockwise nets in their released names (Comfy-Org's repack keeps them): a model
    patch in ComfyUI, a ControlNet row here."""
    gen = torch.Generator().manual_seed(extra)
    state = {
        k: torch.randn(v.shape, generator=gen, dtype=torch.bfloat16)
        for k, v in QwenBlockwiseControlNet(128, 2, extra, device="meta").state_dict().items()
    }
    path = write_tensors(tmp_path / "qwen_image_canny_diffsynth_controlnet.safetensors", state)
    rec = inspect_file(path).to_json()
    assert (rec["kind"], rec["family"], rec["layout"]) == ("controlnet", "qwen-image", "blockwise")
    assert (rec["variant"] if rec["variant"] == "inpaint" else None) == variant
    net = load_controlnet(path)
    assert isinstance(net.module, QwenBlockwiseControlNet) and net.module.mask_hint is bool(extra)
    assert torch.equal(
        net.module.controlnet_blocks[1].output_proj.weight, state["controlnet_blocks.1.output_proj.weight"]
    )
    check_fits(net, "qwen-image-edit")
    with pytest.raises(ModelMismatchError, match="for qwen-image, and the model is z-image"):
        check_fits(net, "z-image")
    del state["controlnet_blocks.1.x_rms.weight"]
    with pytest.raises(LoadoutError) as err:
        load_controlnet(write_tensors(tmp_path / "cut.safetensors", state))
    assert err.value.code == "layout_mismatch"
