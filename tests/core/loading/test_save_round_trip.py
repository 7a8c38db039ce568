"""save_checkpoint: an unpatched model is written back bit for bit, in its own layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from core.errors import FileAccessError
from core.loading.loader import load_checkpoint
from core.loading.save import save_checkpoint
from tests.fixtures.st_files import write_tensors
from tests.fixtures.tiny_models import checkpoint_tensors


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


@pytest.mark.parametrize("family", ["sd1", "sdxl", "sd3", "flux-dev"])
def test_unpatched_round_trip_is_bitwise(tmp_path: Path, family: str) -> None:
    torch.manual_seed(0)
    tensors = {k: v.half() if v.is_floating_point() else v for k, v in checkpoint_tensors(family).items()}
    src = write_tensors(tmp_path / f"{family}.safetensors", tensors, metadata={"modelspec.title": "mine"})
    bundle = load_checkpoint(src)
    out = save_checkpoint(bundle, tmp_path / "copy.safetensors")
    original, copy = load_file(str(src)), load_file(str(out))
    assert set(copy) == set(original)  # open_clip keys, position ids, scheduler buffers all back
    for k, v in original.items():
        assert copy[k].dtype == v.dtype and torch.equal(_bits(copy[k]), _bits(v)), k
    meta = safe_open(str(out), "pt").metadata()
    assert meta["modelspec.title"] == "mine" and meta["modelspec.sai_model_spec"] == "1.0.0"
    assert json.loads(meta["loadout.source"])["family"] == family
    assert load_checkpoint(out).detection.family == family


def test_save_refuses_to_overwrite_its_source_and_can_change_dtype(tmp_path: Path) -> None:
    torch.manual_seed(0)
    src = write_tensors(tmp_path / "sd1.safetensors", checkpoint_tensors("sd1"))
    bundle = load_checkpoint(src)
    with pytest.raises(FileAccessError):
        save_checkpoint(bundle, src)
    out = save_checkpoint(bundle, tmp_path / "half.safetensors", dtype=torch.float16)
    copy = load_file(str(out))
    assert all(v.dtype == torch.float16 for v in copy.values() if v.is_floating_point())
