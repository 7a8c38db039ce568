"""Pickle checkpoints are read without ever running code from them."""

from __future__ import annotations

import os
import pickle
import sys
import types
import zipfile
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from core.errors import FileFormatError, UnsafeFileError
from core.files import read_tensor_index
from core.files.pickle_safe import load_pickle_state_dict


class _Evil:
    """Unpickling this runs a shell command that creates a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def _sd() -> OrderedDict[str, torch.Tensor]:
    return OrderedDict(
        [
            ("model.diffusion_model.input_blocks.0.0.weight", torch.randn(8, 4, 3, 3).half()),
            ("model.diffusion_model.input_blocks.0.0.bias", torch.randn(8).half()),
            ("first_stage_model.decoder.conv_in.weight", torch.randn(16, 4, 3, 3)),
        ]
    )


def test_zip_checkpoint_index_is_read_without_tensor_data(tmp_path: Path) -> None:
    p = tmp_path / "model.ckpt"
    torch.save({"state_dict": _sd(), "global_step": 470000, "epoch": 5}, p)
    idx = read_tensor_index(p)
    assert idx.format == "pickle"
    assert idx.tensors["model.diffusion_model.input_blocks.0.0.weight"].shape == (8, 4, 3, 3)
    assert idx.tensors["model.diffusion_model.input_blocks.0.0.weight"].dtype == "F16"
    assert idx.tensors["first_stage_model.decoder.conv_in.weight"].dtype == "F32"
    assert idx.extra["global_step"] == 470000 and idx.extra["wrapper"] == "state_dict"
    assert any("can carry code" in w for w in idx.warnings)


def test_bare_state_dict_and_load(tmp_path: Path) -> None:
    p = tmp_path / "lora.pt"
    sd = _sd()
    torch.save(sd, p)
    assert set(read_tensor_index(p).tensors) == set(sd)
    loaded = load_pickle_state_dict(p)
    assert all(torch.equal(loaded[k], v) for k, v in sd.items())


def test_views_into_shared_storage(tmp_path: Path) -> None:
    base = torch.randn(10, 4)
    p = tmp_path / "views.pt"
    torch.save({"a": base[:5], "b": base[5:]}, p)
    idx = read_tensor_index(p)
    assert idx.tensors["a"].shape == (5, 4) and idx.tensors["b"].nbytes == 5 * 4 * 4


def test_plain_malicious_pickle_is_refused_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    p = tmp_path / "evil.pt"
    with open(p, "wb") as fh:
        pickle.dump({"state_dict": _Evil(marker)}, fh)
    with pytest.raises(UnsafeFileError) as err:
        read_tensor_index(p)
    assert "system" in err.value.message and err.value.code == "unsafe_pickle"
    with pytest.raises((UnsafeFileError, FileFormatError)):
        load_pickle_state_dict(p)
    assert not marker.exists()


def test_zip_malicious_pickle_is_refused_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    p = tmp_path / "evil.ckpt"
    torch.save({"state_dict": _sd(), "payload": _Evil(marker)}, p)
    with pytest.raises(UnsafeFileError) as err:
        read_tensor_index(p)
    assert "system" in err.value.message
    with pytest.raises(UnsafeFileError):
        load_pickle_state_dict(p)
    assert not marker.exists()


def test_truncated_zip_checkpoint(tmp_path: Path) -> None:
    p = tmp_path / "cut.pt"
    torch.save(_sd(), p)
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) // 2])
    before = p.read_bytes()
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(p)
    assert err.value.code == "truncated"
    assert p.read_bytes() == before


def test_zip_missing_a_storage_record(tmp_path: Path) -> None:
    p = tmp_path / "m.pt"
    torch.save(_sd(), p)
    q = tmp_path / "broken.pt"
    with zipfile.ZipFile(p) as src, zipfile.ZipFile(q, "w") as dst:
        names = src.namelist()
        dropped = next(n for n in names if "/data/" in n)
        for n in names:
            if n != dropped:
                dst.writestr(n, src.read(n))
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(q)
    assert err.value.code == "truncated"


def test_zip_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    p = tmp_path / "notes.pt"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("readme.txt", "hello")
    with pytest.raises(FileFormatError) as err:
        read_tensor_index(p)
    assert err.value.code == "not_a_model"


def test_legacy_torch_format_is_read_safely(tmp_path: Path) -> None:
    p = tmp_path / "old.pth"
    sd = _sd()
    torch.save(sd, p, _use_new_zipfile_serialization=False)
    idx = read_tensor_index(p)
    assert idx.format == "pickle" and set(idx.tensors) == set(sd)
    assert any("legacy" in w for w in idx.warnings)


def test_lightning_leftovers_become_inert_placeholders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old SD .ckpt files carry Lightning callback objects: skipped, never imported."""
    mod = types.ModuleType("pytorch_lightning.callbacks.model_checkpoint")

    class ModelCheckpoint:
        def __init__(self) -> None:
            self.best = 1.0

    ModelCheckpoint.__module__ = mod.__name__
    ModelCheckpoint.__qualname__ = "ModelCheckpoint"
    mod.ModelCheckpoint = ModelCheckpoint  # type: ignore[attr-defined]
    for parent in ("pytorch_lightning", "pytorch_lightning.callbacks"):
        monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    p = tmp_path / "sd-v1.ckpt"
    torch.save({"state_dict": _sd(), "callbacks": {"cb": ModelCheckpoint()}}, p)
    for name in ("pytorch_lightning", "pytorch_lightning.callbacks", mod.__name__):
        monkeypatch.delitem(sys.modules, name)
    idx = read_tensor_index(p)
    assert len(idx.tensors) == 3
    (said,) = [w for w in idx.warnings if "pytorch_lightning" in w]
    assert "would import and run it" in said and "neither imported nor ran it" in said  # not "leftovers"
    assert "pytorch_lightning.callbacks.model_checkpoint" not in sys.modules


def test_garbage_after_pickle_magic(tmp_path: Path) -> None:
    p = tmp_path / "junk.ckpt"
    p.write_bytes(b"\x80\x02" + os.urandom(200))
    with pytest.raises((FileFormatError, UnsafeFileError)):
        read_tensor_index(p)


def test_short_malicious_pickle_never_runs_even_in_format_probes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first bytes are probed for the legacy magic: that probe must not run code either."""
    monkeypatch.chdir(tmp_path)
    marker = Path("p")
    p = tmp_path / "tiny_evil.pth"
    with open(p, "wb") as fh:
        pickle.dump(_Evil(marker), fh, protocol=2)
    assert p.stat().st_size < 64
    with pytest.raises(UnsafeFileError):
        read_tensor_index(p)
    with pytest.raises(UnsafeFileError):
        load_pickle_state_dict(p)
    assert not marker.exists()


def test_a_frame_longer_than_any_file_is_a_clear_error(tmp_path: Path) -> None:
    """Random bytes after the magic sometimes make a FRAME opcode claim 2^63+ bytes: the unpickler
    raises OverflowError, which must become the file's error (it once surfaced as a traceback)."""
    p = tmp_path / "frame.ckpt"
    p.write_bytes(b"\x80\x04\x95" + b"\xff" * 8 + b"junk")
    with pytest.raises(FileFormatError):
        read_tensor_index(p)
