"""v-prediction and zero-terminal-SNR files (NoobAI-XL V-pred and the like): the ``v_pred`` /
``ztsnr`` marker keys ComfyUI and A1111 read, ModelSpec's ``prediction_type``, the override for
files that say nothing, and the ztsnr noise table against diffusers' rescale."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from core.detect.prediction import stated_prediction
from core.errors import LoadoutError
from core.generate.command import generate_files
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.inspect import inspect_file
from core.sampling.model_sampling import ZTSNR_LAST_ALPHA_BAR, for_family, scaled_linear_sigmas
from tests.fixtures.sdxl_tiny import write_sdxl_pair


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("vpred")
    base, _ = write_sdxl_pair(folder)
    tensors = load_file(str(base))
    meta = {"modelspec.architecture": "stable-diffusion-xl-v1-base"}
    out = {"eps": base}
    for name, extra in (("v", {"v_pred": torch.tensor([])}),
                        ("v-ztsnr", {"v_pred": torch.tensor([]), "ztsnr": torch.tensor([])})):  # fmt: skip
        path = folder / f"noob_{name}.safetensors"
        save_file({**tensors, **extra}, str(path), metadata=meta)
        out[name] = path
    return out


def test_the_marker_keys_and_metadata_say_the_prediction(files: dict[str, Path]) -> None:
    for name in ("v", "v-ztsnr"):
        report = inspect_file(files[name]).to_json()
        assert report["kind"] == "checkpoint" and report["family"] == "sdxl", report
        assert report["variant"] == "v-prediction"
    eps = inspect_file(files["eps"]).to_json()
    assert eps["variant"] is None
    assert stated_prediction({"a"}, {"modelspec.prediction_type": "v"}).prediction == "v"  # type: ignore[union-attr]
    assert stated_prediction({"a"}, {"modelspec.predict_key": "epsilon"}).prediction == "eps"  # type: ignore[union-attr]
    assert stated_prediction({"a"}, {}) is None


def test_ztsnr_sigmas_are_comfyuis_rescale_of_diffusers_zero_snr() -> None:
    diffusers_ddim = pytest.importorskip("diffusers.schedulers.scheduling_ddim")
    betas = torch.linspace(0.00085**0.5, 0.012**0.5, 1000, dtype=torch.float64) ** 2
    alphas_bar = torch.cumprod(1 - diffusers_ddim.rescale_zero_terminal_snr(betas), dim=0)
    want = ((1 - alphas_bar) / alphas_bar) ** 0.5
    got = for_family("sdxl", v_prediction=True, zsnr=True).sigmas
    torch.testing.assert_close(got[:-1], want[:-1].float(), rtol=1e-6, atol=0)
    last = ((1 - ZTSNR_LAST_ALPHA_BAR) / ZTSNR_LAST_ALPHA_BAR) ** 0.5  # ComfyUI's finite last sigma
    assert got[-1].item() == pytest.approx(last, rel=1e-6) and 4500 < last < 4530
    torch.testing.assert_close(for_family("sdxl").sigmas, scaled_linear_sigmas().float())


def _picture(path: Path, out: Path, prediction: str | None = None) -> np.ndarray:
    request = GenerateRequest(
        ModelFiles(checkpoint=path),
        ImageSettings("a lighthouse", "fog", Sampling(seed=3, steps=1), 64, 64),
        output=out,
        prediction=prediction,
    )
    generate_files(request)
    with Image.open(out) as im:
        return np.asarray(im.convert("RGB"))


def test_the_files_keys_and_the_override_give_the_same_picture(
    files: dict[str, Path], tmp_path: Path
) -> None:
    eps = _picture(files["eps"], tmp_path / "eps.png")
    ztsnr = _picture(files["v-ztsnr"], tmp_path / "ztsnr.png")
    told = _picture(files["eps"], tmp_path / "told.png", prediction="v-ztsnr")
    assert np.array_equal(ztsnr, told)  # the keys read == the prediction given
    assert not np.array_equal(eps, ztsnr)


def test_a_prediction_for_a_flow_model_or_an_unknown_word_is_refused() -> None:
    with pytest.raises(LoadoutError, match="not a prediction type"):
        GenerateRequest(ModelFiles(checkpoint=Path("x.safetensors")), ImageSettings("a"), prediction="x0")
    with pytest.raises(LoadoutError, match="v-prediction was asked for flux"):
        for_family("flux-dev", v_prediction=True)
