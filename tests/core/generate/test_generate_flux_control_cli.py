"""``loadout generate --diffusion-model flux1-canny-dev.safetensors ... --control-picture PICTURE:canny``
runs FLUX.1 Canny/Depth [dev] with the canny map of PICTURE in its input channels: files as artists
have them (BFL's layout, small but with the 128-wide img_in and the widths detection reads), through
detection, the loaders, the session and the CLI, equal to the same parts composed by hand (the
composition test_parity_flux_control.py proves against diffusers' FluxControlPipeline). The PNG
names the control picture and its preprocessor and reads back; a control picture for a model that
takes none, and a control model without one, are refused in words before any sampling."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from safetensors.torch import save_file

from app.demo import TINY_CLIP
from core.generate.control_picture import ControlPictureParameters, ControlPicturePass, control_picture_in
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.png import to_uint8_rgb
from core.generate.request import ImageSettings, Sampling
from core.loading.architectures import CLIP, FLUX
from core.loading.loader import inspect_for_loading, load_diffusion_model, load_text_encoder, load_vae
from core.models.vae import FLUX_LATENT
from core.patching.lora_stack import LoraStack
from core.preprocess import preprocess
from core.text.conditioning import TextEncoders
from core.text.t5_tokenizer import T5Tokenizer
from tests.core.generate.reference import t5_tokenizers, vae_pair
from tests.core.patching.test_lora_flux_control import control_lora
from tests.fixtures.cli_runs import flux_args, generate, refused
from tests.fixtures.drawn import landscape
from tests.fixtures.tiny_models import FLUX_DEV, TINY_T5, Tiny

pytest.importorskip("sentencepiece")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

CONTROL = dataclasses.replace(FLUX_DEV, in_channels=128, vec_in_dim=768, context_in_dim=4096)
DEV = dataclasses.replace(FLUX_DEV, vec_in_dim=768, context_in_dim=4096)
PROMPT, SEED, STEPS = "a house", 7, 2


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("flux_control")
    out = {
        "control": root / "flux1-canny-dev.safetensors",
        "dev": root / "flux1-dev.safetensors",
        "clip": root / "clip_l.safetensors",
        "t5": root / "t5xxl_fp16.safetensors",
        "vae": root / "ae.safetensors",
    }
    save_file(Tiny("flux-control", FLUX, "flux-dev", CONTROL, seed=31).file_state(), str(out["control"]))
    save_file(Tiny("flux-dev", FLUX, "flux-dev", DEV, seed=32).file_state(), str(out["dev"]))
    clip = Tiny("clip-l-full-vocabulary", CLIP, "clip-l", TINY_CLIP, seed=22, layout="transformers")
    save_file(clip.file_state(), str(out["clip"]))
    save_file(TINY_T5.file_state(), str(out["t5"]))
    _, vae = vae_pair(16, FLUX_LATENT, seed=23)
    save_file({k: v.contiguous() for k, v in vae.state_dict().items()}, str(out["vae"]))
    t5_tokenizers(root / "t5_tokenizer")
    out["tokenizer"] = root / "t5_tokenizer"
    out["photo"] = landscape(root / "house.png", 64, 64)
    return out


def _args(f: dict[str, Path], model: str) -> list[str]:
    return flux_args(f[model], f["clip"], f["t5"], f["vae"], PROMPT, SEED, steps=STEPS)


def _by_hand(
    f: dict[str, Path], rgb: np.ndarray, model: str = "control", lora: Path | None = None
) -> np.ndarray:
    loaded = load_diffusion_model(f[model])
    if lora is not None:
        stack = LoraStack([loaded])
        stack.add(lora, 0.8)
        stack.apply()
    nets = Networks(
        "flux-dev", loaded.module,
        TextEncoders(clip_l=load_text_encoder(f["clip"]).module, t5=load_text_encoder(f["t5"]).module),
        load_vae(f["vae"]).module,
    )  # fmt: skip
    pipeline = Pipeline(nets, Compute(), t5_tokenizer=T5Tokenizer(f["tokenizer"] / "spiece.model"))
    s = Sampling(seed=SEED, steps=STEPS, sampler="euler", scheduler="simple")
    pixels, _, _ = pipeline.run(
        ImageSettings(PROMPT, width=64, height=64, sampling=s), Hooks(), passes=[ControlPicturePass(rgb)]
    )
    return to_uint8_rgb(pixels[0].float())


def test_loadout_generate_follows_the_canny_map_of_the_control_picture(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = inspect_for_loading(files["control"])[1]
    assert (found.family, found.variant) == ("flux-dev", "control")
    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    canny = ("--control-picture", f"{files['photo']}:canny")
    made = generate(_args(files, "control"), tmp_path / "house-canny.png", *canny)
    got = made.pixels
    assert control_picture_in(made.parameters.extra) == ControlPictureParameters("house.png", "canny")
    edges = preprocess("canny", np.asarray(Image.open(files["photo"]).convert("RGB")))
    want = _by_hand(files, edges).astype(np.int32)
    assert got.shape == (64, 64, 3) and got.std() > 5
    assert np.abs(got - want).max() <= 1


def test_a_control_picture_where_none_is_taken_and_none_where_one_is_are_refused(
    files: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    picture = ("--control-picture", str(files["photo"]))
    assert "takes none" in refused(_args(files, "dev"), tmp_path / "a.png", capsys, *picture)
    assert "needs a control picture" in refused(_args(files, "control"), tmp_path / "b.png", capsys)


def test_loadout_generate_with_a_control_lora_on_flux_dev_follows_the_control_picture(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LoRA through the session (placed by the manager, its widened img_in made on the way)
    at strength 0.8, equal to the stack applied by hand; the model is left 64 wide."""
    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    lora = tmp_path / "flux1-depth-dev-lora.safetensors"
    control_lora(lora, hidden=DEV.hidden_size)
    out = tmp_path / "house-lora.png"
    edges = tmp_path / "edges.png"
    Image.fromarray(preprocess("canny", np.asarray(Image.open(files["photo"]).convert("RGB")))).save(edges)
    made = generate(_args(files, "dev"), out, "--lora", f"{lora}:0.8", "--control-picture", str(edges))
    got = made.pixels
    assert control_picture_in(made.parameters.extra) == ControlPictureParameters("edges.png", None)
    want = _by_hand(files, np.asarray(Image.open(edges).convert("RGB")), "dev", lora).astype(np.int32)
    assert got.std() > 5 and np.abs(got - want).max() <= 1
