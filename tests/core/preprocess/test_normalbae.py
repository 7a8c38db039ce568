"""NormalBAE from a model file, against controlnet_aux (the reference comfyui_controlnet_aux and
sd-webui-controlnet run): its ``NNET`` (EfficientNet-B5 from the vendored geffnet, the BN decoder)
at the real widths and depths with random weights, saved as ``scannet.pt``'s ``model`` dict holds
it (as safetensors, and as a ``DataParallel`` pickle converted with Loadout's convert); detected,
checked key by key, loaded zero-copy, equal to the reference network; the map equal to what
``NormalBaeDetector`` makes of a drawn picture; run through the memory manager on a simulated small
card; missing, pickled and damaged files explained (tests/fixtures/normalbae.py says how the
reference is imported without torchvision)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from app.cli import main
from core.detect.detector import detect
from core.errors import FileFormatError, LoadoutError, ModelMismatchError
from core.files import read_tensor_index
from core.generate.workflows import controlnet_parameter, controlnets_in
from core.loading.preprocessor import load_preprocessor
from core.memory.devices import device_named
from core.preprocess import find_preprocessor, preprocess, preprocessor_named
from core.preprocess import normal_bae as normal_bae_mod
from core.preprocess.placed import PreprocessorModels, model_files, model_run
from core.session.placement import Placement, PlacementConfig
from tests.fixtures.drawn import landscape
from tests.fixtures.normalbae import aux_detector, normalbae_files, reference_model

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def reference() -> torch.nn.Module:
    return reference_model()


@pytest.fixture(scope="module")
def files(reference: torch.nn.Module, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return normalbae_files(tmp_path_factory.mktemp("normalbae"), reference)


@pytest.fixture(scope="module")
def picture(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    with Image.open(landscape(tmp_path_factory.mktemp("drawn") / "house.png", 64, 64)) as im:
        return np.asarray(im.convert("RGB"))


@pytest.mark.parametrize(
    ("name", "layout"),
    [
        ("original", "original"),
        ("pth", "data_parallel"),
        ("converted", "data_parallel"),
        ("pickle", "original"),
    ],
)
def test_detected_by_its_keys(files: dict[str, Path], name: str, layout: str) -> None:
    det = detect(read_tensor_index(files[name]).tensors, {}, files[name].name)
    assert (det.kind, det.family, det.layout) == ("preprocessor_model", "normalbae", layout)
    whole = name != "pickle"  # the telling keys alone: no blocks
    assert det.fields == {"stages": 7 if whole else 0, "blocks": 39 if whole else 0}


def test_the_network_equals_controlnet_aux(reference: torch.nn.Module, files: dict[str, Path]) -> None:
    loaded = load_preprocessor(files["original"])
    cfg = loaded.config
    assert loaded.family == "normalbae" and cfg.encoder.stem == 48 and cfg.encoder.head == 2048  # type: ignore[attr-defined]
    assert [s.blocks for s in cfg.encoder.stages] == [3, 5, 5, 7, 7, 9, 3]  # type: ignore[attr-defined]
    # filled zero-copy from the mapped file
    stem = loaded.module.encoder.original_model.conv_stem.weight  # type: ignore[union-attr]
    assert torch.equal(stem, reference.encoder.original_model.conv_stem.weight)
    assert stem.data_ptr() != reference.encoder.original_model.conv_stem.weight.data_ptr()
    # the DataParallel pickle converted to safetensors fills the same network
    converted = load_preprocessor(files["converted"])
    assert converted.layout == "data_parallel"
    mine, theirs = loaded.module.state_dict(), converted.module.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


class _Recorded(torch.nn.Module):
    """A network answering as the aux's ``NNET`` does (its predictions' list first, the finest
    last), keeping what it was given and what it answered."""

    def __init__(self, net: torch.nn.Module, loadout: bool) -> None:
        super().__init__()
        self.net, self.loadout = net, loadout
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> tuple[list[torch.Tensor]]:
        out = self.net(x) if self.loadout else self.net(x)[0][-1]
        self.seen += [x, out]
        return ([out],)


@pytest.fixture(scope="module")
def made(files: dict[str, Path], picture: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The drawn picture at 72 x 90 and the map Loadout makes of it (resolution 64: the network
    at 64 x 64) with the converted file, in RAM."""
    odd = cv2.resize(picture, (90, 72), interpolation=cv2.INTER_LINEAR)
    module = load_preprocessor(files["converted"]).module
    return odd, normal_bae_mod.normal_map(module, odd, {"resolution": 64}, CPU)


def test_the_map_equals_normalbae_detectors(
    reference: torch.nn.Module, files: dict[str, Path], made: tuple[np.ndarray, np.ndarray]
) -> None:
    """The drawn picture's map as NormalBaeDetector makes it: made at the resolution's size (short
    side 64, multiples of 64: 64 x 64) and resized back to the picture's (72 x 90). The network on
    the detector's input equal to the aux's to 5e-5 (not bit for bit: the aux's weights take other
    CPU kernel paths); the map pixel for pixel with Loadout's network in the detector, and with the
    aux's own a few pixels one step apart."""
    odd, got = made
    ours_net = _Recorded(load_preprocessor(files["converted"]).module, loadout=True)  # as `made`
    theirs_net = _Recorded(reference, loadout=False)
    ours = aux_detector(ours_net)(odd, detect_resolution=64, image_resolution=64, output_type="np")
    theirs = aux_detector(theirs_net)(odd, detect_resolution=64, image_resolution=64, output_type="np")
    (x, mine), (x_aux, want) = ours_net.seen, theirs_net.seen
    assert torch.equal(x, x_aux) and mine.shape == want.shape == (1, 4, 64, 64)
    assert want[:, :3].std((2, 3)).min() > 0.1  # the normals vary over the picture
    assert (mine - want).abs().max() < 5e-5  # unit normals and kappa (~1): fp32 rounding alone
    assert got.shape == (72, 90, 3) and ours.shape == (64, 64, 3)
    assert np.array_equal(got, cv2.resize(ours, (90, 72), interpolation=cv2.INTER_LINEAR))
    apart = np.abs(ours.astype(int) - theirs.astype(int))
    assert apart.max() <= 1 and (apart > 0).mean() < 0.01
    assert len(np.unique(theirs.reshape(-1, 3), axis=0)) > 50  # a map, not a flat colour


def test_the_map_through_the_manager(files: dict[str, Path], made: tuple[np.ndarray, np.ndarray]) -> None:
    """The map made with the network placed on a simulated card smaller than its 290 MB (partly
    resident, the rest streamed) equals the one made in RAM; the events name the preprocessor."""
    odd, in_ram = made
    settings = {"resolution": 64}
    assert find_preprocessor("normal_bae").model_input(72, 90, settings) == (64, 64)  # type: ignore[misc]
    assert find_preprocessor("normal_bae").model_input(80, 150, settings) == (64, 128)  # type: ignore[misc]
    small = Placement(device_named("cpu"), PlacementConfig(simulate_bytes=160 << 20), cpu_is_device=True)
    run = model_run(small, PreprocessorModels(), {"normalbae": files["converted"]})
    assert np.array_equal(preprocess("normal_bae", odd, settings, model=run), in_ram)
    assert any(e.kind == "partial_load" and e.model == "scannet preprocessor" for e in small.events.events())


def test_missing_pickled_and_damaged_files_are_explained(files: dict[str, Path], tmp_path: Path) -> None:
    record = find_preprocessor("normal_bae")  # sd-webui-controlnet's name
    assert record.name == "normalbae"
    with pytest.raises(
        LoadoutError, match=r"needs a NormalBAE model file.*scannet\.pt of lllyasviel/Annotators"
    ):
        model_files([record], [], [])
    with pytest.raises(FileFormatError, match=r"only as safetensors.*convert this file to safetensors"):
        load_preprocessor(files["pickle"])
    # the library's pickle is passed over for its safetensors file
    library = [
        (files["pth"], "preprocessor_model", "normalbae"),
        (files["converted"], "preprocessor_model", "normalbae"),
    ]
    assert model_files([record], [], library) == {"normalbae": files["converted"]}
    with pytest.raises(ModelMismatchError, match=r"does not hold a complete NormalBAE network.*0 stages"):
        load_preprocessor(files["part"])
    # a depth model where the NormalBAE one goes
    with pytest.raises(ModelMismatchError, match=r"is a normalbae model, and the depth preprocessor"):
        run = model_run(
            Placement(device_named("cpu"), PlacementConfig()), PreprocessorModels(),
            {"depth-anything-v2": files["original"]},
        )  # fmt: skip
        run(find_preprocessor("depth"), np.zeros((8, 8, 3), np.uint8), {"resolution": 140})


def test_the_command_line_and_the_png_parameters(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    picture = landscape(tmp_path / "house.png", 64, 64)
    out = tmp_path / "normal.png"
    args = ["preprocess", "normalbae", str(picture), "-o", str(out), "--set", "resolution=64"]
    assert main([*args, "--model", str(files["converted"])]) == 0
    with Image.open(out) as im:
        assert im.size == (64, 64)
    bad = tmp_path / "bad.png"
    assert main(["preprocess", "normal_bae", str(picture), "-o", str(bad)]) != 0
    err = capsys.readouterr().err
    assert "scannet.pt" in err and "Traceback" not in err and not bad.exists()
    assert main(["preprocess", "normalbae", str(picture), "-o", str(bad), "--model", str(files["pth"])]) != 0
    err = capsys.readouterr().err
    assert "only as safetensors" in err and "convert" in err and not bad.exists()
    # an A1111 picture's normal_bae is read back as this preprocessor
    key, text = controlnet_parameter(0, "control_v11p_sd15_normalbae", 1.0, 0.0, 1.0, "normal_bae")
    (item,) = controlnets_in({key: text})
    assert preprocessor_named(item.module) == "normalbae"
