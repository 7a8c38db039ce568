"""FLUX Redux's small parts: the file told from its shapes (and nothing else taken for it), the
families it fits, the tokens appended in order, and its PNG items read back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from core.errors import ModelMismatchError
from core.generate.passes import append_tokens
from core.generate.redux import ReduxPicture, parameter_items, redux_in, takes_redux
from core.generate.workflow_request import ReduxUse
from core.loading.loader import inspect_for_loading
from core.sampling.conditioning import Conditioning


def _redux(path: Path, up: tuple[int, int] = (48, 1152), down: tuple[int, int] = (16, 48)) -> Path:
    state = {
        "redux_up.weight": torch.zeros(up), "redux_up.bias": torch.zeros(up[0]),
        "redux_down.weight": torch.zeros(down), "redux_down.bias": torch.zeros(down[0]),
    }  # fmt: skip
    save_file(state, str(path))
    return path


def test_a_redux_file_is_a_style_model_for_flux_and_a_lookalike_is_not(tmp_path: Path) -> None:
    det = inspect_for_loading(_redux(tmp_path / "flux1-redux-dev.safetensors"))[1]
    assert (det.kind, det.family, det.fields) == (
        "style_model",
        "flux",
        {"encoder_width": 1152, "context_width": 16},
    )
    odd = inspect_for_loading(_redux(tmp_path / "odd.safetensors", down=(20, 48)))[1]
    assert odd.kind == "unknown"  # the hidden layer is not 3 x the context width


def test_redux_fits_the_flux1_models_only() -> None:
    assert all(takes_redux(f) for f in ("flux-dev", "flux-schnell", "flux-kontext", "flux-fill", "chroma"))
    assert not any(takes_redux(f) for f in ("sdxl", "sd3", "flux2-dev", "qwen-image", "no-such-family"))


def test_tokens_append_in_order_and_a_width_that_does_not_fit_is_refused() -> None:
    cond = Conditioning(torch.zeros(2, 5, 8), mask=torch.ones(2, 5, dtype=torch.bool))
    out = append_tokens(cond, (torch.ones(1, 3, 8), torch.full((1, 2, 8), 2.0)))
    assert out.context.shape == (2, 10, 8) and out.mask is not None and bool(out.mask.all())
    assert out.context[:, 5:, 0].tolist() == [[1, 1, 1, 2, 2]] * 2
    with pytest.raises(ModelMismatchError, match="4 wide"):
        append_tokens(cond, (torch.ones(1, 3, 4),))


def test_the_png_items_read_back() -> None:
    uses = (
        ReduxUse(Path("m/flux1-redux-dev.safetensors"), Path("a, b.png"), 0.75),
        ReduxUse(Path("r.sft"), Path("c.png")),
    )
    pictures = [ReduxPicture(u, np.zeros((1, 1, 3), np.uint8), f"{i}" * 64) for i, u in enumerate(uses)]
    items = parameter_items(pictures, lambda p: f"{p.stem} [0123456789]")
    assert items["Redux 0"] == (
        "Model: flux1-redux-dev [0123456789], Picture: a b.png [000000000000], Strength: 0.75, Type: multiply"
    )
    found = redux_in({**items, "Redux x": "Model: y", "Redux 2": "Picture: p.png [1]"})
    assert [(r.model, r.picture, r.hash, r.strength) for r in found] == [
        ("flux1-redux-dev", "a b.png", "000000000000", 0.75), ("r", "c.png", "1" * 12, 1.0),
    ]  # fmt: skip
