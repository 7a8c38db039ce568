"""``loadout convert`` on quantized files: GGUF and scaled fp8 become plain safetensors at a chosen
dtype (their values, dequantized with gguf-py's numbers / ComfyUI's scale rule); without a dtype a
GGUF file is refused with a message."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from core.errors import LoadoutError
from core.files import read_tensor_index
from core.files.safetensors import SafetensorsFile
from core.loading.check import check_file
from core.loading.convert_file import convert_file
from tests.fixtures.fp8_scaled import write_scaled_fp8
from tests.fixtures.gguf_quant import write_comfy_gguf
from tests.fixtures.tiny_models import TINY_FLUX, TINY_UNET_SD1


def test_gguf_converts_to_safetensors_at_a_dtype(tmp_path: Path) -> None:
    path, reference, _ = write_comfy_gguf(tmp_path / "m.gguf", "sd1", TINY_UNET_SD1.file_state(), "Q4_K")
    with pytest.raises(LoadoutError) as err:
        convert_file(path, tmp_path / "out.safetensors")
    assert "output dtype" in err.value.fix and not (tmp_path / "out.safetensors").exists()
    out = convert_file(path, tmp_path / "out.safetensors", torch.float16)
    f = SafetensorsFile(out)
    assert set(read_tensor_index(out).tensors) == set(reference)
    for key, want in reference.items():
        assert torch.equal(f.tensor(key), want.to(torch.float16)), key  # conv kernels in their 4-D shape
    assert check_file(out)["ok"]


def test_scaled_fp8_converts_to_its_values(tmp_path: Path) -> None:
    src = tmp_path / "flux_fp8_scaled.safetensors"
    written = write_scaled_fp8(src, TINY_FLUX.file_state(), style="comfy_quant")
    out = convert_file(src, tmp_path / "out.safetensors", torch.bfloat16)
    f = SafetensorsFile(out)
    keys = set(read_tensor_index(out).tensors)
    assert keys == set(written.values())  # scales and comfy_quant records folded away
    for key, want in written.values(torch.float32).items():
        assert torch.equal(f.tensor(key), want.to(torch.bfloat16)), key
    assert check_file(out)["ok"]


def test_the_cli_converts_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.cli import main

    path, reference, _ = write_comfy_gguf(tmp_path / "m.gguf", "flux", TINY_FLUX.file_state(), "Q8_0")
    out = tmp_path / "m.safetensors"
    monkeypatch.setattr(sys, "argv", ["loadout", "convert", str(path), "-o", str(out), "--dtype", "fp32"])
    assert main() == 0
    f = SafetensorsFile(out)
    assert all(torch.equal(f.tensor(k), v.to(torch.float32)) for k, v in reference.items())
