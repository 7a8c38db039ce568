"""`loadout convert`: dtype changes and pickle -> safetensors, atomic, inputs untouched."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from core.errors import FileAccessError
from core.loading.convert_file import convert_file
from tests.fixtures.st_files import write_tensors

ROOT = Path(__file__).resolve().parents[2]


def _sd() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "w": torch.randn(8, 4, generator=g) * 1000,  # exceeds fp8 range: must clamp, not NaN
        "b": torch.randn(8, generator=g),
        "steps": torch.arange(3),
    }


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_dtype_conversion(tmp_path: Path) -> None:
    src = write_tensors(tmp_path / "m.safetensors", _sd(), metadata={"modelspec.title": "t"})
    before = _digest(src)
    out = convert_file(src, tmp_path / "m16.safetensors", torch.float16)
    got = load_file(str(out))
    assert got["w"].dtype == torch.float16 and torch.equal(got["w"], _sd()["w"].half())
    assert got["steps"].dtype == torch.int64
    fp8 = load_file(str(convert_file(src, tmp_path / "m8.safetensors", torch.float8_e4m3fn)))
    assert fp8["w"].dtype == torch.float8_e4m3fn and fp8["b"].dtype == torch.float32
    assert torch.isfinite(fp8["w"].float()).all() and fp8["w"].float().abs().max() == 448
    assert _digest(src) == before


def test_pickle_to_safetensors_is_bitwise(tmp_path: Path) -> None:
    src = tmp_path / "old.ckpt"
    torch.save({"state_dict": _sd(), "global_step": 10}, src)
    out = convert_file(src, tmp_path / "new.safetensors")
    got = load_file(str(out))
    for k, v in _sd().items():
        assert torch.equal(got[k], v)


def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli import main  # in this process: test_cli_converts proves the process's contract

    src = write_tensors(tmp_path / "m.safetensors", _sd())
    with pytest.raises(FileAccessError):
        convert_file(src, src, torch.float16)
    assert main(["convert", str(tmp_path / "missing.ckpt"), "-o", str(tmp_path / "x.sft")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err
    assert not (tmp_path / "x.sft").exists()


def test_cli_converts(tmp_path: Path) -> None:
    src = write_tensors(tmp_path / "m.safetensors", _sd())
    res = _cli("convert", str(src), "-o", str(tmp_path / "o.safetensors"), "--dtype", "bf16")
    assert res.returncode == 0, res.stderr
    assert load_file(str(tmp_path / "o.safetensors"))["w"].dtype == torch.bfloat16
