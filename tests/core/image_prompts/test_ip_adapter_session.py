"""Image prompts through a session and the command line: the IP-Adapter and its image encoder (found
in ComfyUI's models/clip_vision beside models/ipadapter) placed by the manager, the picture the same
on a small simulated card, the PNG parameters written and read back, and the refusals in words."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.cli import main
from app.demo import DemoLibrary, ensure_demo_library
from core.errors import LoadoutError
from core.generate.command import generate_files
from core.generate.image_prompts import IpAdapterParameters, ip_adapters_in
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.generate.workflow_request import IpAdapterUse
from core.queue.grid import image_cells, parse_axis
from tests.core.image_prompts.ip_files import ip_adapter_file
from tests.core.image_prompts.vision_files import vision_reference
from tests.fixtures.st_files import write_tensors


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoLibrary, Path, Path]:
    root = tmp_path_factory.mktemp("ipa")
    demo = ensure_demo_library(root / "demo")
    models = root / "ComfyUI" / "models"
    ip = ip_adapter_file(models / "ipadapter" / "ip-adapter-plus_sd15.safetensors", plus=True)
    tower = {k: v.half() for k, v in vision_reference(layers=1).state_dict().items()}
    write_tensors(models / "clip_vision" / "CLIP-ViT-H-14.safetensors", tower)
    rgb = np.random.default_rng(3).integers(0, 256, (80, 96, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(root / "cat.png")
    return demo, ip, root / "cat.png"


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _make(
    demo: DemoLibrary, out: Path, limit: int | None = None, steps: int = 3, **image: object
) -> np.ndarray:
    sampling = Sampling(seed=3, steps=steps)
    settings = ImageSettings("a cat", "fog", width=64, height=64, sampling=sampling, **image)  # type: ignore[arg-type]
    request = GenerateRequest(ModelFiles(checkpoint=demo.checkpoint), settings, output=out, vram_limit=limit)
    return _pixels(generate_files(request).images[0].path)


def test_an_image_prompt_from_the_command_line_is_placed_and_named_in_the_png(
    files: tuple[DemoLibrary, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo, ip, cat = files
    out = tmp_path / "ip.png"
    code = main(
        [
            "generate", str(demo.checkpoint), "--prompt", "a cat", "--negative", "fog", "--seed", "3",
            "--steps", "3", "--size", "64x64", "--ip-adapter", f"{ip}:{cat}:0.8@0-0.9",
            "--vram-limit", "48MiB", "-o", str(out), "--json",
        ]
    )  # fmt: skip
    stdout, err = capsys.readouterr()
    assert code == 0, err
    roles = {e["role"] for e in json.loads(stdout)["events"]}
    assert {"ip_adapter", "image_encoder"} <= roles  # placed by the manager
    (item,) = ip_adapters_in(parse_parameters(read_png_parameters(out)).extra)
    assert item == IpAdapterParameters(item.model, "cat.png", item.image_hash, 0.8, 0.0, 0.9, item.encoder)
    assert item.model.startswith("ip-adapter-plus_sd15 [") and item.encoder.startswith("CLIP-ViT-H-14 [")
    assert len(item.image_hash) == 12
    # the encoder (42 MB) streams on the 48 MiB card: the same picture as with no card at all
    whole = _make(demo, tmp_path / "whole.png", ip_adapters=(IpAdapterUse(ip, cat, 0.8, 0.0, 0.9),))
    assert np.array_equal(_pixels(out), whole)
    assert not np.array_equal(whole, _make(demo, tmp_path / "plain.png"))


def test_refusals_say_what_is_wrong(files: tuple[DemoLibrary, Path, Path], tmp_path: Path) -> None:
    demo, ip, cat = files
    alone = tmp_path / "alone" / ip.name
    alone.parent.mkdir()
    alone.write_bytes(ip.read_bytes())
    with pytest.raises(LoadoutError) as err:
        _make(demo, tmp_path / "x.png", ip_adapters=(IpAdapterUse(alone, cat),))
    assert err.value.code == "missing_image_encoder" and "CLIP ViT-H/14" in err.value.what
    (tmp_path / "not.png").write_text("no picture")
    with pytest.raises(LoadoutError) as err:
        _make(demo, tmp_path / "x.png", ip_adapters=(IpAdapterUse(ip, tmp_path / "not.png"),))
    assert err.value.code == "not_an_image"
    sdxl = {
        "image_proj.proj.weight": torch.zeros(4 * 2048, 1024),
        "image_proj.proj.bias": torch.zeros(4 * 2048),
        "image_proj.norm.weight": torch.zeros(2048),
        "image_proj.norm.bias": torch.zeros(2048),
        "ip_adapter.1.to_k_ip.weight": torch.zeros(640, 2048),
        "ip_adapter.1.to_v_ip.weight": torch.zeros(640, 2048),
    }
    other = write_tensors(ip.parent / "ip-adapter_sdxl_vit-h.safetensors", sdxl)
    try:
        with pytest.raises(LoadoutError) as err:
            _make(demo, tmp_path / "x.png", ip_adapters=(IpAdapterUse(other, cat),))
    finally:
        other.unlink()
    assert err.value.code == "wrong_ip_adapter" and "for Stable Diffusion XL" in err.value.what
    with pytest.raises(LoadoutError) as err:
        _make(demo, tmp_path / "x.png", ip_adapters=(IpAdapterUse(demo.lora, cat),))
    assert err.value.code == "wrong_kind"


def test_a_weight_type_and_a_mask_from_the_command_line_reach_the_picture_and_the_png(
    files: tuple[DemoLibrary, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo, ip, cat = files
    left = np.zeros((64, 64), dtype=np.uint8)
    left[:, :32] = 255
    Image.fromarray(left).save(tmp_path / "left.png")
    out, mask = tmp_path / "masked.png", tmp_path / "left.png"
    code = main(
        [
            "generate", str(demo.checkpoint), "--prompt", "a cat", "--negative", "fog", "--seed", "3",
            "--steps", "3", "--size", "64x64", "--ip-adapter", f"{ip}:{cat}:type=ease out:0.8:mask={mask}",
            "-o", str(out),
        ]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    (item,) = ip_adapters_in(parse_parameters(read_png_parameters(out)).extra)
    assert (item.weight, item.weight_type, item.mask, len(item.mask_hash)) == (
        0.8,
        "ease out",
        "left.png",
        12,
    )
    use = IpAdapterUse(ip, cat, 0.8, weight_type="ease out", mask=tmp_path / "left.png")
    assert np.array_equal(_pixels(out), _make(demo, tmp_path / "same.png", ip_adapters=(use,)))
    unmasked = _make(
        demo, tmp_path / "unmasked.png", ip_adapters=(IpAdapterUse(ip, cat, 0.8, weight_type="ease out"),)
    )
    linear = _make(demo, tmp_path / "linear.png", ip_adapters=(IpAdapterUse(ip, cat, 0.8),))
    assert not np.array_equal(_pixels(out), unmasked) and not np.array_equal(unmasked, linear)
    with pytest.raises(LoadoutError) as err:
        IpAdapterUse(ip, cat, weight_type="precise")
    assert err.value.code == "bad_argument" and "style transfer" in err.value.why


def test_a_weight_type_grid_with_a_precise_type_is_the_same_on_a_small_card_and_read_back(
    files: tuple[DemoLibrary, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ``ip-adapter-type`` axis over linear and composition precise (on the demo's four SD1.5
    transformers, 0-3: every one swapped, the picture on the negative rows), with layer weights
    and a boost: three token sets per row in the conditioning, batched and streamed on a 48 MiB
    card, give the same picture as a plain generation with no card; the linear cell drops the
    boost (whole pictures against diffusers: test_ip_adapter_block_sd15.py / _sdxl.py)."""
    demo, ip, cat = files
    out = tmp_path / "grid"
    code = main(
        [
            "generate", str(demo.checkpoint), "--prompt", "a cat", "--negative", "fog", "--seed", "3",
            "--steps", "2", "--size", "64x64", "--vram-limit", "48MiB", "-o", str(out), "--quiet",
            "--ip-adapter", f"{ip}:{cat}:0.8:type=composition precise:boost=1.5:layers=0:1, 3:2",
            "--x", "ip-adapter-type:linear,composition precise",
        ]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    cells = [out / "x0-y0-z0.png", out / "x1-y0-z0.png"]
    linear, precise = (ip_adapters_in(parse_parameters(read_png_parameters(c)).extra)[0] for c in cells)
    layers = ((0, 1.0), (3, 2.0))
    assert (precise.weight_type, precise.boost, precise.layer_weights) == ("composition precise", 1.5, layers)
    assert (linear.weight_type, linear.boost, linear.layer_weights) == ("linear", None, layers)
    use = IpAdapterUse(ip, cat, 0.8, weight_type="composition precise", boost=1.5, layer_weights=layers)
    assert np.array_equal(_pixels(cells[1]), _make(demo, tmp_path / "same.png", steps=2, ip_adapters=(use,)))
    assert not np.array_equal(_pixels(cells[0]), _pixels(cells[1]))
    with pytest.raises(LoadoutError, match="unknown IP-Adapter weight type"):
        parse_axis("ip-adapter-type:linear,precise")
    with pytest.raises(LoadoutError, match="unknown IP-Adapter embeds scaling"):
        parse_axis("ip-adapter-scaling:V only,K")
    scaled = image_cells(
        ImageSettings("a cat", ip_adapters=(use,)),
        None,
        parse_axis("ip-adapter-scaling:V only,K+mean(V) w/ C penalty"),
    )
    assert [c.image.ip_adapters[0].scaling for c in scaled] == ["V only", "K+mean(V) w/ C penalty"]
    with pytest.raises(LoadoutError, match="needs an IP-Adapter"):
        image_cells(ImageSettings("a cat"), None, parse_axis("ip-adapter-weight:0.5,1"))


@pytest.mark.parametrize(
    ("option", "words"),
    [
        ("type=style and composition:composition={cat}", "needs SDXL"),
        ("layers=3:2.5 6:1", "is not INDEX:WEIGHT"),
        ("layers=0:1, 16:1", "transformer 16"),  # SD1.5 numbers 16 (0-15)
        ("type=style transfer:boost=1.2", "boost goes with"),
        ("scaling=K+W", "is not an IP-Adapter embeds scaling"),
        ("combine=average", "needs more than one picture"),
        ("image={cat}:combine=max", "is not a way to combine"),
        ("image={cat}:type=strong style and composition:composition={cat}", "do not go together"),
    ],
)
def test_block_weight_refusals_from_the_command_line(
    files: tuple[DemoLibrary, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    option: str, words: str,
) -> None:  # fmt: skip
    demo, ip, cat = files
    code = main(
        [
            "generate", str(demo.checkpoint), "--prompt", "a cat", "--steps", "1", "--size", "64x64",
            "-o", str(tmp_path / "x.png"), "--ip-adapter", f"{ip}:{cat}:" + option.format(cat=cat),
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and words in err, err
    assert not (tmp_path / "x.png").exists()


def test_several_pictures_a_negative_and_a_scaling_from_the_command_line_are_read_back(
    files: tuple[DemoLibrary, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``image=`` twice (three pictures), ``combine=``, ``negative=`` and ``scaling=``: the PNG item
    names them and reads back; the picture is the one the same settings make in core (the
    numerics against diffusers and the pack's formulas: test_ip_adapter_batches.py,
    test_ip_adapter_embeds.py)."""
    demo, ip, cat = files
    dog, fog = tmp_path / "dog.png", tmp_path / "fog.png"
    for i, path in enumerate((dog, fog)):
        Image.fromarray(np.random.default_rng(i).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(path)
    out = tmp_path / "batch.png"
    option = f"{ip}:{cat}:0.7:image={dog}:image={cat}:combine=norm average:negative={fog}:scaling=K+V"
    code = main(
        [
            "generate", str(demo.checkpoint), "--prompt", "a cat", "--negative", "fog", "--seed", "3",
            "--steps", "2", "--size", "64x64", "-o", str(out), "--quiet", "--ip-adapter", option,
        ]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    (item,) = ip_adapters_in(parse_parameters(read_png_parameters(out)).extra)
    assert (item.scaling, item.combine, item.negative) == ("K+V", "norm average", "fog.png")
    assert [name for name, _ in item.pictures] == ["dog.png", "cat.png"]
    assert all(len(h) == 12 for _, h in (*item.pictures, (item.negative, item.negative_hash)))
    use = IpAdapterUse(ip, cat, 0.7, scaling="K+V", pictures=(dog, cat), combine="norm average", negative=fog)
    assert np.array_equal(_pixels(out), _make(demo, tmp_path / "same.png", steps=2, ip_adapters=(use,)))
    one = IpAdapterUse(ip, cat, 0.7, scaling="K+V", negative=fog)
    assert not np.array_equal(_pixels(out), _make(demo, tmp_path / "one.png", steps=2, ip_adapters=(one,)))
