"""Assigning file tensors into meta-built modules: zero-copy, checked, interruptible."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from core.errors import InterruptedByUser, ModelMismatchError
from core.files.safetensors import SafetensorsFile
from core.loading.assign import assign_weights, compare_layout, expected_layout, interrupt_check
from core.ops import default_ops as ops
from tests.fixtures.st_files import write_tensors


class Tiny(nn.Module):
    def __init__(self, device: str | None = None) -> None:
        super().__init__()
        self.a = ops.Linear(4, 8, device=device)
        self.n = ops.LayerNorm(8, device=device)
        self.register_buffer("pos", torch.empty(3, device=device))


def _file(tmp_path: Path, dtype: torch.dtype = torch.float32) -> Path:
    g = torch.Generator().manual_seed(1)
    t = {
        "a.weight": torch.randn(8, 4, generator=g),
        "a.bias": torch.randn(8, generator=g),
        "n.weight": torch.randn(8, generator=g),
        "n.bias": torch.randn(8, generator=g),
        "pos": torch.arange(3.0),
    }
    return write_tensors(tmp_path / "tiny.safetensors", {k: v.to(dtype) for k, v in t.items()})


def test_layout_comparison() -> None:
    exp = expected_layout(Tiny(device="meta"))
    assert exp["a.weight"] == (8, 4)
    found = dict(exp) | {"a.weight": (8, 5), "text_model.embeddings.position_ids": (1, 77), "x": (1,)}
    del found["pos"]
    rep = compare_layout(exp, found, harmless={"text_model.embeddings.position_ids"})
    assert rep.missing == ("pos",) and rep.unexpected == ("x",)
    assert rep.shape_mismatches == ("a.weight: file (8, 5) vs model (8, 4)",)
    assert rep.ignored == ("text_model.embeddings.position_ids",) and not rep.ok


def test_assign_is_zero_copy_when_dtypes_match(tmp_path: Path) -> None:
    p = _file(tmp_path)
    m = Tiny(device="meta")
    with SafetensorsFile(p) as f:
        seen = []
        assign_weights(m, f.tensor, {k: k for k in f}, component="tiny", progress=seen.append)
        src = f.tensor("a.weight")
    assert m.a.weight.data_ptr() == src.data_ptr()
    assert not m.a.weight.requires_grad
    assert seen[-1].tensors_done == 5 and seen[-1].bytes_done == seen[-1].bytes_total
    out = m.n(m.a(torch.ones(2, 4)))
    assert out.shape == (2, 8) and torch.isfinite(out).all()


def test_assign_converts_dtype_once(tmp_path: Path) -> None:
    p = _file(tmp_path, torch.float16)
    m = Tiny(device="meta")
    with SafetensorsFile(p) as f:
        assign_weights(m, f.tensor, {k: k for k in f}, component="tiny", dtype=torch.float32)
    assert m.a.weight.dtype == torch.float32


def test_shape_mismatch_and_missing_are_clear(tmp_path: Path) -> None:
    p = write_tensors(tmp_path / "bad.safetensors", {"a.weight": torch.zeros(8, 5)})
    with SafetensorsFile(p) as f:
        with pytest.raises(ModelMismatchError) as err:
            assign_weights(Tiny(device="meta"), f.tensor, {"a.weight": "a.weight"}, component="tiny")
        assert err.value.code == "missing_weights"
        keys = {k: "a.weight" for k in ("a.weight", "a.bias", "n.weight", "n.bias", "pos")}
        with pytest.raises(ModelMismatchError) as err:
            assign_weights(Tiny(device="meta"), f.tensor, keys, component="tiny")
        assert err.value.code == "shape_mismatch" and "(8, 5)" in err.value.message


def test_interrupt_between_tensors(tmp_path: Path) -> None:
    p = _file(tmp_path)
    calls = {"n": 0}

    def flag() -> bool:
        calls["n"] += 1
        return calls["n"] > 2

    with SafetensorsFile(p) as f, pytest.raises(InterruptedByUser):
        assign_weights(
            Tiny(device="meta"),
            f.tensor,
            {k: k for k in f},
            component="tiny",
            check=interrupt_check(flag),
        )
    assert calls["n"] == 3
