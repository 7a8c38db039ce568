"""``loadout generate --diffusion-model flux1-fill-dev.safetensors --text-encoder clip_l.safetensors
--text-encoder t5xxl.safetensors --vae ae.safetensors --init IMAGE --mask MASK`` (and ``--outpaint``)
inpaints with FLUX.1 Fill: files as artists have them (BFL's layout for the Fill network, small but
with its 384-channel input and the widths detection reads: CLIP-L 768 with its whole vocabulary,
T5-XXL 4096; a Flux-format VAE), through detection, the loaders, the session and the CLI, equal to
the same parts composed by hand (the composition ``test_parity_flux_fill.py`` proves against
diffusers' FluxFillPipeline), at the Fill family's usual settings (FluxGuidance 30, CFG 1)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from safetensors.torch import save_file

from app.cli import main
from core.generate.outpaint_settings import Outpaint, outpaint_in
from core.generate.parameters import parse_parameters
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.png import read_png_parameters, to_uint8_rgb
from core.generate.request import ImageSettings, Sampling
from core.loading.architectures import FLUX
from core.loading.loader import inspect_for_loading, load_diffusion_model, load_text_encoder, load_vae
from core.text.conditioning import TextEncoders
from core.text.t5_tokenizer import T5Tokenizer
from tests.fixtures.drawn import landscape
from tests.fixtures.tiny_models import FLUX_DEV, Tiny

pytest.importorskip("sentencepiece")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

FILL = dataclasses.replace(FLUX_DEV, in_channels=384, vec_in_dim=768, context_in_dim=4096)
PROMPT, SEED, STEPS = "a red door", 7, 2


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, flux_encoder_files: dict[str, Path]) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fill")
    out = dict(flux_encoder_files)
    out["fill"] = root / "flux1-fill-dev.safetensors"
    save_file(Tiny("flux-fill", FLUX, "flux-fill", FILL, seed=21).file_state(), str(out["fill"]))
    out["init"] = landscape(root / "house.png", 64, 64)
    mask = np.zeros((64, 64), np.uint8)
    mask[16:48, 8:40] = 255
    Image.fromarray(mask).save(root / "mask.png")
    out["mask"] = root / "mask.png"
    return out


def _by_hand(f: dict[str, Path], settings: ImageSettings) -> np.ndarray:
    nets = Networks(
        "flux-fill", load_diffusion_model(f["fill"]).module,
        TextEncoders(clip_l=load_text_encoder(f["clip"]).module, t5=load_text_encoder(f["t5"]).module),
        load_vae(f["vae"]).module,
    )  # fmt: skip
    pipeline = Pipeline(nets, Compute(), t5_tokenizer=T5Tokenizer(f["tokenizer"] / "spiece.model"))
    rgb = np.array(Image.open(f["init"]).convert("RGB"))
    pixels, _, _ = pipeline.run(settings, Hooks(), init=rgb)
    return to_uint8_rgb(pixels[0].float())


def _cli(f: dict[str, Path], out: Path, *extra: str) -> np.ndarray:
    args = [
        "generate", "--diffusion-model", str(f["fill"]), "--text-encoder", str(f["clip"]),
        "--text-encoder", str(f["t5"]), "--vae", str(f["vae"]), "--prompt", PROMPT, "--steps", str(STEPS),
        "--sampler", "euler", "--scheduler", "simple", "--seed", str(SEED), "--init", str(f["init"]),
        "-o", str(out), "--quiet", *extra,
    ]  # fmt: skip
    assert main(args) == 0
    return np.asarray(Image.open(out).convert("RGB")).astype(np.int32)


def test_the_fill_file_is_detected(files: dict[str, Path]) -> None:
    found = inspect_for_loading(files["fill"])[1]
    assert (found.kind, found.family) == ("diffusion_model", "flux-fill")


def test_loadout_generate_inpaints_and_outpaints_with_flux_fill(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    got = _cli(files, tmp_path / "door.png", "--mask", str(files["mask"]))
    params = read_png_parameters(tmp_path / "door.png")
    assert "Model: flux1-fill-dev" in params and "Distilled CFG Scale: 30" in params
    s = Sampling(seed=SEED, steps=STEPS, sampler="euler", scheduler="simple")
    settings = ImageSettings(
        PROMPT, width=64, height=64, sampling=s, init_image=files["init"], mask_image=files["mask"]
    )
    want = _by_hand(files, settings).astype(np.int32)
    assert got.shape == (64, 64, 3) and got.std() > 5
    assert np.abs(got - want).max() <= 1

    grown = _cli(files, tmp_path / "wider.png", "--outpaint", "0,0,32,0", "--feather", "8")
    assert grown.shape == (64, 96, 3)
    p = parse_parameters(read_png_parameters(tmp_path / "wider.png"))
    assert outpaint_in(p.extra) == Outpaint(0, 0, 32, 0, 8)
    wider = dataclasses.replace(settings, mask_image=None, outpaint=Outpaint(0, 0, 32, 0, 8), width=96)
    assert np.abs(grown - _by_hand(files, wider).astype(np.int32)).max() <= 1
