"""A NaN or Inf weight never gives a black picture with exit 0: the component that made the
non-finite values is named (text encoder, diffusion model, VAE), nothing is saved, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from app.cli import main
from app.demo import DemoLibrary
from tests.fixtures.demo_copy import DemoAt


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _damaged(demo: DemoLibrary, where: Path, part: str, value: float) -> Path:
    state = load_file(str(demo.checkpoint))
    key = next(k for k in sorted(state) if k.startswith(part) and k.endswith("weight") and state[k].ndim >= 2)
    state[key] = state[key].clone()
    state[key].view(-1)[0] = value
    out = where / f"damaged-{part.split('.')[0]}.safetensors"
    save_file(state, str(out))
    return out


@pytest.mark.parametrize(
    ("part", "value", "named"),
    [
        ("cond_stage_model.", float("inf"), "text encoder"),
        ("model.diffusion_model.", float("nan"), "diffusion model"),
        ("first_stage_model.decoder.", float("nan"), "VAE"),
    ],
)
def test_a_non_finite_weight_is_named_and_nothing_is_saved(
    demo: DemoLibrary, tmp_path: Path, part: str, value: float, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = _damaged(demo, tmp_path, part, value)
    out = tmp_path / "out.png"
    code = main(
        ["generate", str(ckpt), "--prompt", "a fox", "--steps", "2", "--size", "64x64", "-o", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 2, err[-1500:]
    assert f"the {named} produced" in err and "Traceback" not in err
    assert not out.exists()


def test_check_values_names_the_non_finite_tensor_and_a_clean_file_is_ok(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    damaged = _damaged(demo, tmp_path, "model.diffusion_model.", float("nan"))
    assert main(["check", "--values", "--json", str(damaged)]) == 1
    rec = json.loads(capsys.readouterr().out)
    (name,) = rec["nonfinite"]
    assert name.startswith("model.diffusion_model.") and not rec["ok"]
    assert main(["check", "--values", str(demo.checkpoint)]) == 0
    captured = capsys.readouterr()
    assert "values" in captured.err and "tensors" in captured.err  # the progress line
    assert "NOT OK" not in captured.out
