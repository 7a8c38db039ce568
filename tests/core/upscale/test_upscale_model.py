"""Upscale models: a real (tiny) RealESRGAN-layout RRDBNet file is detected and built by spandrel,
runs as spandrel's own model runs it, is tiled as ComfyUI's ImageUpscaleWithModel tiles, and gives
the same bits whatever the memory manager does with it (whole, partly placed, streamed)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file, save_file

from app.cli import main
from core.errors import LoadoutError
from core.memory.devices import cpu_device
from core.memory.policy import MemorySettings, VramState
from core.session import Placement, PlacementConfig
from core.upscale.model import load_upscale_model
from core.upscale.placed import run_upscale
from core.upscale.tiled import feather_mask, tile_starts, tiled_scale, upscale_pictures
from tests.fixtures.upscale_models import write_rrdb


@pytest.fixture(scope="module")
def rrdb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_rrdb(tmp_path_factory.mktemp("up") / "4x-tiny-esrgan.safetensors")


def _spandrel_reference(path: Path):  # type: ignore[no-untyped-def]
    """spandrel's own ESRGAN architecture on the file's tensors (the way ComfyUI gets its model)."""
    load_upscale_model(path)  # makes sure spandrel is importable here (see core.upscale.arches)
    esrgan = importlib.import_module("spandrel.architectures.ESRGAN")
    return esrgan.ESRGANArch().load(load_file(str(path))).eval()


def _picture(h: int, w: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(seed))


def test_spandrel_detects_the_file_and_ours_computes_what_spandrels_model_computes(rrdb: Path) -> None:
    model = load_upscale_model(rrdb)
    assert (model.architecture, model.scale, model.input_channels, model.output_channels) == (
        "ESRGAN",
        4,
        3,
        3,
    )
    reference = _spandrel_reference(rrdb)
    x = _picture(40, 48)
    with torch.inference_mode():
        want = reference(x.clone())
    got = upscale_pictures(model, x, scale=4, out_channels=3, device=torch.device("cpu"))
    assert got.shape == (1, 3, 160, 192)
    assert torch.equal(got, want)
    assert float(got.std()) > 1e-3  # a picture, not a constant


def test_tiles_start_and_are_feathered_as_comfyui_places_them() -> None:
    assert tile_starts(400, 512, 32) == [0]
    assert tile_starts(1000, 512, 32) == [0, 480, 960]  # the last one 40 pixels long
    assert tile_starts(72, 32, 8) == [0, 24, 48]
    assert tile_starts(60, 32, 8) == [0, 24, 48]  # a start past side - overlap is clamped back to it
    mask = feather_mask(torch.Size([1, 1, 6, 100]), 4)
    assert mask[0, 0, :, 50].tolist() == [0.25, 0.5, 0.75, 0.75, 0.5, 0.25]  # 6 rows: both ramps meet
    assert mask[0, 0, 3, :5].tolist() == pytest.approx([0.1875, 0.375, 0.5625, 0.75, 0.75])
    assert feather_mask(torch.Size([1, 1, 3, 3]), 4).eq(1).all()  # too short to feather


def _ramp(length: int, feather: int) -> np.ndarray:
    i = np.arange(length, dtype=np.float64)
    return np.minimum(1.0, np.minimum((i + 1) / feather, (length - i) / feather))


def test_a_tiled_picture_is_the_feathered_blend_of_spandrels_tiles(rrdb: Path) -> None:
    model = load_upscale_model(rrdb)
    reference = _spandrel_reference(rrdb)
    x = _picture(56, 72, seed=1)
    tile, overlap, scale = 32, 8, 4
    got = upscale_pictures(
        model, x, scale=4, out_channels=3, device=torch.device("cpu"), tile=tile, overlap=overlap
    )
    total = np.zeros((3, 56 * 4, 72 * 4))
    weight = np.zeros_like(total)
    feather = overlap * scale
    for y in range(0, 56 - overlap, tile - overlap):
        for xx in range(0, 72 - overlap, tile - overlap):
            y0, x0 = min(y, 56 - overlap), min(xx, 72 - overlap)
            with torch.inference_mode():
                out = reference(x[:, :, y0 : y0 + tile, x0 : x0 + tile].clone())[0].double().numpy()
            w = np.outer(_ramp(out.shape[1], feather), _ramp(out.shape[2], feather))
            total[:, y0 * 4 : y0 * 4 + out.shape[1], x0 * 4 : x0 * 4 + out.shape[2]] += out * w
            weight[:, y0 * 4 : y0 * 4 + out.shape[1], x0 * 4 : x0 * 4 + out.shape[2]] += w
    want = torch.from_numpy(total / weight)
    torch.testing.assert_close(got[0].double(), want, rtol=0, atol=2e-6)
    # and the seams are real: the whole picture in one tile is another picture
    whole = upscale_pictures(model, x, scale=4, out_channels=3, device=torch.device("cpu"))
    assert not torch.equal(whole, got)


def test_tiling_a_pointwise_model_changes_nothing() -> None:
    x = _picture(70, 90, seed=2)

    def nearest(t: torch.Tensor) -> torch.Tensor:
        return F.interpolate(t, scale_factor=4, mode="nearest")

    tiled = tiled_scale(x, nearest, scale=4, tile=32, overlap=8)
    torch.testing.assert_close(tiled, nearest(x), rtol=0, atol=1e-6)


def _card(limit: int) -> Placement:
    settings = MemorySettings(vram_state=VramState.NORMAL_VRAM, reserve_bytes=0)
    return Placement(cpu_device(0), PlacementConfig(settings, limit, 1 << 18), cpu_is_device=True)


def test_the_model_is_placed_by_the_manager_and_gives_the_same_bits_whatever_the_card(rrdb: Path) -> None:
    x = _picture(40, 40, seed=3)
    whole = run_upscale(Placement(None), load_upscale_model(rrdb), x)
    for limit in (8 << 20, (1 << 18) + (600 << 10)):  # all of it fits; then it partly streams
        placement = _card(limit)
        got = run_upscale(placement, load_upscale_model(rrdb), x, tile=24, overlap=4)
        kinds = [e.kind for e in placement.events.events()]
        assert ("partial_load" in kinds) == (limit < 8 << 20), kinds
        tiled = run_upscale(Placement(None), load_upscale_model(rrdb), x, tile=24, overlap=4)
        assert torch.equal(got, tiled)
    assert whole.shape == (1, 3, 160, 160)


def _png(path: Path, h: int, w: int) -> Path:
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
    return path


def test_loadout_upscale_writes_the_picture_and_reports(
    rrdb: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = _png(tmp_path / "in.png", 30, 20)
    out = tmp_path / "big.png"
    code = main(["upscale", str(rrdb), str(image), "-o", str(out), "--json", "--vram-limit", "16MiB"])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(stdout)
    assert (report["architecture"], report["scale"], report["size"]) == ("ESRGAN", 4, [80, 120])
    assert any(e["role"] == "upscale_model" for e in report["events"])
    with Image.open(out) as im:
        assert im.format == "PNG" and im.size == (80, 120)
        got = np.asarray(im.convert("RGB"))
    with Image.open(image) as im:
        x = torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1)[None].float() / 255.0
    with torch.inference_mode():
        want = _spandrel_reference(rrdb)(x)[0]
    assert np.array_equal(got, np.clip(255.0 * want.permute(1, 2, 0).numpy(), 0, 255).astype(np.uint8))


def test_a_file_that_is_not_an_upscale_model_is_refused_clearly(tmp_path: Path) -> None:
    bad = tmp_path / "not-an-upscaler.safetensors"
    save_file({"foo.weight": torch.zeros(3, 3)}, str(bad))
    with pytest.raises(LoadoutError, match="not an upscale model Loadout can read"):
        load_upscale_model(bad)
    cut = tmp_path / "cut.safetensors"
    sd = load_file(str(write_rrdb(tmp_path / "ok.safetensors")))
    del sd["body.0.rdb2.conv3.weight"]
    save_file(sd, str(cut))
    with pytest.raises(LoadoutError):
        load_upscale_model(cut)


@pytest.mark.parametrize("which", ["model", "image"])
def test_loadout_upscale_says_what_is_wrong_and_writes_nothing(
    rrdb: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str
) -> None:
    image = _png(tmp_path / "in.png", 16, 16)
    args = {
        "model": [str(tmp_path / "missing.pth"), str(image)],
        "image": [str(rrdb), str(tmp_path / "no.png")],
    }
    out = tmp_path / "o.png"
    code = main(["upscale", *args[which], "-o", str(out)])
    _, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err and ("missing.pth" in err or "no.png" in err)
    assert not out.exists()


def test_weights_that_cannot_stream_and_were_not_placed_are_found() -> None:
    from torch import nn

    from core.upscale.model import to_op_layers
    from core.upscale.placed import loose_off_device

    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.PReLU(4), nn.Conv2d(4, 3, 1))
    assert to_op_layers(net) == 2
    cuda = torch.device("cuda")
    assert loose_off_device(net, cuda) == ["0.weight", "0.bias", "1.weight", "2.weight", "2.bias"]
    for i in (0, 2):
        net[i].stream = object()  # type: ignore[assignment]  # streamed: copied to the device per forward
    assert loose_off_device(net, cuda) == ["1.weight"]  # a PReLU's slopes stay behind
    assert loose_off_device(net, torch.device("cpu")) == []


def test_a_compact_model_with_prelus_runs_as_spandrels_own_even_streamed(tmp_path: Path) -> None:
    from tests.fixtures.upscale_models import write_compact

    path = write_compact(tmp_path / "2x-compact.safetensors")
    model = load_upscale_model(path)
    assert (model.architecture, model.scale) == ("RealESRGAN Compact", 2)
    compact = importlib.import_module("spandrel.architectures.Compact")
    reference = compact.CompactArch().load(load_file(str(path))).eval()
    x = _picture(20, 24, seed=5)
    with torch.inference_mode():
        want = reference(x.clone())
    placement = _card((1 << 18) + (7 << 10))  # the convolutions partly stream
    got = run_upscale(placement, model, x)
    assert "partial_load" in [e.kind for e in placement.events.events()]
    assert torch.equal(got, want)


@pytest.mark.gpu
def test_on_a_cuda_card_resident_and_streamed_give_the_same_bits(rrdb: Path) -> None:
    from core.memory.devices import discover_devices

    gpu = next(d for d in discover_devices() if d.kind == "cuda")
    x = _picture(48, 40, seed=6)
    settings = MemorySettings(vram_state=VramState.NORMAL_VRAM, reserve_bytes=0)

    def on(limit: int) -> tuple[torch.Tensor, list[str]]:
        placement = Placement(gpu, PlacementConfig(settings, limit, 64 << 20))
        out = run_upscale(placement, load_upscale_model(rrdb), x, tile=32, overlap=8)
        return out, [e.kind for e in placement.events.events()]

    whole, _ = on(0)  # the real card, no limit
    streamed, kinds = on((64 << 20) + (400 << 10))
    assert "partial_load" in kinds
    assert torch.equal(streamed, whole)
    cpu = run_upscale(Placement(None), load_upscale_model(rrdb), x, tile=32, overlap=8)
    torch.testing.assert_close(whole, cpu, rtol=0, atol=1e-4)  # another device's kernels: close, not equal
