"""Command-line text -> typed values (app/commands/args.py): ranges refused with the range said."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.commands.args import BYTES, parse_bytes, parse_controlnet, parse_lora, parse_size
from core.errors import LoadoutError
from core.generate.workflow_request import ControlNetUse
from core.patching.merge import LoraArg
from core.values import BadValueError


def test_lora_arg_parsing() -> None:
    assert parse_lora("a.safetensors") == LoraArg(Path("a.safetensors"))
    assert parse_lora("a.safetensors:0.7") == LoraArg(Path("a.safetensors"), 0.7, None)
    assert parse_lora("C:/x/a.safetensors:0.7:-1") == LoraArg(Path("C:/x/a.safetensors"), 0.7, -1.0)


@pytest.mark.parametrize("text", ["F:nan", "F:inf", "F:1e308", "F:-1e400", "F:0.5:nan", "F:101"])
def test_a_non_finite_or_absurd_lora_strength_is_refused_with_the_range(text: str) -> None:
    with pytest.raises(BadValueError) as err:
        parse_lora(text)
    assert "from -100 to 100" in err.value.message


def test_a_strength_that_is_not_a_number_is_said_so_when_the_file_exists(tmp_path: Path) -> None:
    lora = tmp_path / "F.safetensors"
    lora.write_bytes(b"x")
    with pytest.raises(BadValueError) as err:
        parse_lora(f"{lora}:abc")
    assert "'abc' is not a number" in err.value.message and "does not exist" not in err.value.message


def test_parse_bytes() -> None:
    assert parse_bytes("4GiB") == 4 << 30 and parse_bytes("512mb") == 512 << 20
    assert parse_bytes("100", BYTES) == 100 and parse_bytes("0", BYTES) == 0


@pytest.mark.parametrize("text", ["inf", "1e400", "0", "-1", "nan", "-4GiB", "GiB", "4XB", "1e30"])
def test_a_vram_limit_never_silently_means_no_limit(text: str) -> None:
    with pytest.raises(BadValueError) as err:
        parse_bytes(text)
    assert "1.00 MiB" in err.value.message and "leave it out for no limit" in err.value.message


@pytest.mark.parametrize(
    ("text", "says"),
    [("5000x5000", "larger than 4096x4096"), ("65x64", "multiples of 8"), ("0x64", "from 64 to 16384"),
     ("1e400x64", "not a number"), ("64", "WIDTHxHEIGHT"), ("99999999999999999999x64", "out of range")],
)  # fmt: skip
def test_sizes(text: str, says: str) -> None:
    with pytest.raises(BadValueError) as err:
        parse_size(text)
    assert says in err.value.message
    assert parse_size("1024x768") == (1024, 768)


BAD_CONTROLNETS = ["cn.safetensors::canny", "a:b:x", "a:b:1:0.9:0.1", "a:b:1:0", "a:b:1:0:1:2"]


@pytest.mark.parametrize("text", BAD_CONTROLNETS)
def test_a_bad_controlnet_argument_is_refused_in_words(text: str) -> None:
    with pytest.raises(LoadoutError) as err:
        parse_controlnet(text)
    assert err.value.fix


def test_controlnet_arguments_keep_windows_drive_letters() -> None:
    assert parse_controlnet(r"C:\m\cn.safetensors:D:\h.png:0.5") == ControlNetUse(
        Path(r"C:\m\cn.safetensors"), Path(r"D:\h.png"), 0.5
    )
    assert parse_controlnet("cn.safetensors:h.png:0.8:0.1:0.9") == ControlNetUse(
        Path("cn.safetensors"), Path("h.png"), 0.8, 0.1, 0.9
    )


def test_a_controlnet_with_no_hint_is_the_file_alone_or_an_empty_hint() -> None:
    """A Z-Image Fun ControlNet 2.x inpainting on the picture to inpaint alone."""
    assert parse_controlnet(r"C:\m\fun.safetensors") == ControlNetUse(Path(r"C:\m\fun.safetensors"), None)
    assert parse_controlnet("fun.safetensors::0.8:0:0.5") == ControlNetUse(
        Path("fun.safetensors"), None, 0.8, 0.0, 0.5
    )


def test_a_union_controlnets_type_is_one_more_part_anywhere_after_the_paths() -> None:
    assert parse_controlnet("u.safetensors:h.png:type=depth") == ControlNetUse(
        Path("u.safetensors"), Path("h.png"), control_type="depth"
    )
    assert parse_controlnet(r"C:\u.safetensors:D:\h.png:canny:0.7:Type=Low Quality:0:0.5") == ControlNetUse(
        Path(r"C:\u.safetensors"), Path(r"D:\h.png"), 0.7, 0.0, 0.5, "canny", "low quality"
    )


def test_the_device_left_out_is_a_macs_gpu_where_there_is_one() -> None:
    """A Mac's command line computed on the CPU unless told (the default was "cpu")."""
    from app.cli import build_parser
    from app.commands.args import default_device

    assert default_device(lambda: True) == "mps" and default_device(lambda: False) == "cpu"
    import torch

    assert default_device() == ("mps" if torch.backends.mps.is_available() else "cpu")
    parser = build_parser()
    for argv in (["generate", "m.safetensors", "--prompt", "p", "-o", "x.png"], ["run", "m.safetensors"],
                 ["upscale", "u.pth", "i.png", "-o", "o.png"]):  # fmt: skip
        assert parser.parse_args(argv).device is None, argv  # resolved by default_device() at run time
        assert parser.parse_args([*argv, "--device", "cpu"]).device == "cpu"
