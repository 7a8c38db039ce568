"""Depth Anything V2 from a model file: transformers' ``DepthAnythingForDepthEstimation`` at the
real vits widths (384 wide, 6 heads, DPT head 64 with maps of 48/96/192/384, head 32) and four
blocks, random weights, saved as transformers saves it and in the original repository's layout;
detected, checked key by key, loaded zero-copy, placed, and equal to transformers to 1e-4."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import DepthAnythingForDepthEstimation

from core.detect.detector import detect
from core.errors import FileFormatError, LoadoutError, ModelMismatchError
from core.files import read_tensor_index
from core.loading.preprocessor import load_preprocessor
from core.memory.devices import device_named
from core.preprocess import preprocess
from core.preprocess.depth import input_size
from core.preprocess.placed import PreprocessorModels, model_run
from core.session.placement import Placement, PlacementConfig
from tests.fixtures.depth_anything import GRID, depth_files, reference_model


@pytest.fixture(scope="module")
def reference() -> DepthAnythingForDepthEstimation:
    return reference_model()


@pytest.fixture(scope="module")
def files(
    reference: DepthAnythingForDepthEstimation, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    return depth_files(tmp_path_factory.mktemp("depth"), reference)


def _reference_depth(model: DepthAnythingForDepthEstimation, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(pixel_values=x).predicted_depth


@pytest.mark.parametrize("layout", ["transformers", "original"])
def test_detected_by_its_keys(files: dict[str, Path], layout: str) -> None:
    index = read_tensor_index(files[layout])
    det = detect(index.tensors, {}, files[layout].name)
    assert (det.kind, det.family, det.layout, det.variant) == (
        "preprocessor_model",
        "depth-anything-v2",
        layout,
        "vits",
    )
    assert det.fields == {"width": 384, "blocks": 4}


def test_the_transformers_file_equals_transformers(
    reference: DepthAnythingForDepthEstimation, files: dict[str, Path]
) -> None:
    loaded = load_preprocessor(files["transformers"])
    assert loaded.layout == "transformers" and loaded.config.taps == (0, 1, 2, 3)  # type: ignore[attr-defined]
    torch.manual_seed(1)
    for rows, cols in ((GRID, GRID), (5, 7)):  # the trained grid, and one its positions are resized to
        x = torch.randn(1, 3, rows * 14, cols * 14)
        want = _reference_depth(reference, x)
        got = loaded.module(x)
        assert want.abs().max() > 0.05  # not a map the ReLU flattened
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (got - want).abs().max()


def test_the_original_file_is_the_same_network_filled_zero_copy(
    reference: DepthAnythingForDepthEstimation, files: dict[str, Path]
) -> None:
    loaded = load_preprocessor(files["original"])
    assert loaded.layout == "original"
    x = torch.randn(1, 3, GRID * 14, GRID * 14)
    assert torch.allclose(loaded.module(x), _reference_depth(reference, x), atol=1e-4, rtol=1e-4)
    # the fused q/k/v rows went in as views of the mapped file, not copies
    qkv = loaded.module.pretrained.blocks[0].attn  # type: ignore[union-attr]
    assert qkv.k.weight.untyped_storage().data_ptr() == qkv.q.weight.untyped_storage().data_ptr()
    # elsewhere the original code's position rule (a scale factor with DINOv2's 0.1 offset), not
    # transformers': the same network, another resize of the position table
    y = torch.randn(1, 3, 5 * 14, 7 * 14)
    want = _reference_depth(reference, y)
    diff = (loaded.module(y) - want).abs().max() / want.abs().max()
    assert 0 < diff < 0.2


def test_pickles_damaged_files_and_other_kinds_are_refused_in_words(
    files: dict[str, Path], tmp_path: Path
) -> None:
    with pytest.raises(FileFormatError, match=r"only as safetensors.*Download the \.safetensors version"):
        load_preprocessor(files["pickle"])
    index = read_tensor_index(files["original"])
    state = load_file(files["original"])
    del state["depth_head.scratch.refinenet2.resConfUnit1.conv2.bias"]
    save_file(state, tmp_path / "cut.safetensors")
    with pytest.raises(ModelMismatchError, match=r"1 weights missing.*refinenet2\.resConfUnit1\.conv2\.bias"):
        load_preprocessor(tmp_path / "cut.safetensors")
    assert index.format == "safetensors"
    save_file({"weight": torch.zeros(3, 3)}, tmp_path / "other.safetensors")
    with pytest.raises(LoadoutError, match="not a preprocessor model"):
        load_preprocessor(tmp_path / "other.safetensors")


def test_the_resize_rule_is_depth_anythings_lower_bound() -> None:
    assert input_size(512, 768, 518) == (518, 784)  # 777 px is 55.5 patches: rounded to even, 56
    assert input_size(768, 512, 518) == (784, 518)
    assert input_size(100, 100, 518) == (518, 518)
    assert input_size(300, 1000, 518) == (518, 1722)  # 1726.7 -> 123 patches


def test_the_map_through_the_manager(files: dict[str, Path]) -> None:
    """A picture's map made with the model placed by the manager on a simulated small card equals
    the one made in RAM, fills 0..255, and is the picture's size."""
    picture = (np.indices((60, 90)).sum(axis=0)[..., None] * np.array([1, 2, 3]) % 256).astype(np.uint8)
    settings = {"resolution": 140}
    ram = Placement(device_named("cpu"), PlacementConfig())
    files_by_family = {"depth-anything-v2": files["original"]}
    plain = preprocess(
        "depth", picture, settings, model=model_run(ram, PreprocessorModels(), files_by_family)
    )
    small = Placement(device_named("cpu"), PlacementConfig(simulate_bytes=40 << 20), cpu_is_device=True)
    placed = preprocess(
        "depth", picture, settings, model=model_run(small, PreprocessorModels(), files_by_family)
    )
    assert plain.shape == (60, 90, 3) and plain.min() == 0 and plain.max() == 255
    assert np.array_equal(plain, placed)
    assert any(e.model.endswith("preprocessor") for e in small.events.events())
