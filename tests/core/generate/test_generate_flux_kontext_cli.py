"""``loadout generate --diffusion-model flux1-kontext-dev.safetensors --text-encoder clip_l.safetensors
--text-encoder t5xxl_fp16.safetensors --vae ae.safetensors --reference house.png`` edits a picture
with FLUX.1 Kontext: files as artists have them (BFL's layout, the file name telling Kontext from
Flux dev; a narrow two-block network with the widths detection reads: CLIP-L 768 with its whole
vocabulary, T5-XXL 4096; a Flux-format VAE), through detection, the loaders, the reference pass,
the session and the CLI, equal to the same plan composed by hand through the engine (the
composition ``test_parity_flux_kontext.py`` proves against diffusers' FluxKontextPipeline, at the
real width too), with the PNG parameters naming the reference by file name and hash.

``--keep-reference-size`` gives the picture to the VAE at its own size (cropped to a multiple of 8)
instead of Kontext's preferred ~1 megapixel size (``FluxKontextImageScale``, the default, proven on
its own in ``test_references.py``): ComfyUI's template with that node left out, and a CPU run of
seconds instead of minutes."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from safetensors.torch import save_file

from app.cli import main
from core.archs.catalog import REFERENCES
from core.archs.references import OwnSize
from core.generate.parameters import parse_parameters
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.png import read_png_parameters, to_uint8_rgb
from core.generate.references import ReferencePass, read_references, references_in
from core.generate.request import ImageSettings, Sampling
from core.loading.architectures import FLUX
from core.loading.loader import inspect_for_loading, load_diffusion_model, load_text_encoder, load_vae
from core.text.conditioning import TextEncoders
from core.text.t5_tokenizer import T5Tokenizer
from tests.fixtures.drawn import landscape
from tests.fixtures.tiny_models import FLUX_DEV, Tiny

pytest.importorskip("sentencepiece")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

KONTEXT = dataclasses.replace(FLUX_DEV, vec_in_dim=768, context_in_dim=4096)
PROMPT, SEED, STEPS, FAMILY = "make the door red", 7, 2, "flux-kontext"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, flux_encoder_files: dict[str, Path]) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kontext")
    out = dict(flux_encoder_files)
    out["model"] = root / "flux1-kontext-dev.safetensors"
    save_file(Tiny("flux-kontext", FLUX, FAMILY, KONTEXT, seed=31).file_state(), str(out["model"]))
    out["reference"] = landscape(root / "house.png", 84, 52)  # cropped to 80 x 48 for the VAE
    return out


def _by_hand(f: dict[str, Path], settings: ImageSettings) -> np.ndarray:
    nets = Networks(
        FAMILY, load_diffusion_model(f["model"]).module,
        TextEncoders(clip_l=load_text_encoder(f["clip"]).module, t5=load_text_encoder(f["t5"]).module),
        load_vae(f["vae"]).module,
    )  # fmt: skip
    pipeline = Pipeline(nets, Compute(), t5_tokenizer=T5Tokenizer(f["tokenizer"] / "spiece.model"))
    pictures = read_references(settings.references, FAMILY)
    edit = ReferencePass(pictures, OwnSize(REFERENCES["kontext"]))
    pixels, _, _ = pipeline.run(settings, Hooks(), None, [edit])
    return to_uint8_rgb(pixels[0].float())


def test_the_kontext_file_is_detected(files: dict[str, Path]) -> None:
    found = inspect_for_loading(files["model"])[1]
    assert (found.kind, found.family) == ("diffusion_model", FAMILY)


def test_loadout_generate_edits_a_picture_with_kontext(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    out, ref = tmp_path / "door.png", files["reference"]
    args = [
        "generate", "--diffusion-model", str(files["model"]), "--text-encoder", str(files["clip"]),
        "--text-encoder", str(files["t5"]), "--vae", str(files["vae"]), "--prompt", PROMPT,
        "--steps", str(STEPS), "--sampler", "euler", "--scheduler", "simple", "--seed", str(SEED),
        "--size", "64x64", "--reference", str(ref), "--keep-reference-size", "-o", str(out), "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    got = np.asarray(Image.open(out).convert("RGB")).astype(np.int32)
    p = parse_parameters(read_png_parameters(out))
    digest = hashlib.sha256(ref.read_bytes()).hexdigest()[:12]
    assert [(r.name, r.hash) for r in references_in(p.extra)] == [("house.png", digest)]
    assert p.extra["Reference size"] == "own" and p.guidance == 2.5  # Kontext's FluxGuidance

    s = Sampling(seed=SEED, steps=STEPS, sampler="euler", scheduler="simple", guidance=2.5)
    settings = ImageSettings(
        PROMPT, width=64, height=64, sampling=s, references=(ref,), reference_own_size=True
    )
    want = _by_hand(files, settings).astype(np.int32)
    without = _by_hand(files, dataclasses.replace(settings, references=())).astype(np.int32)
    assert got.shape == (64, 64, 3) and got.std() > 5 and np.isfinite(got).all()
    assert np.abs(got - want).max() <= 1
    assert np.abs(want - without).mean() > 1  # the reference moves the picture
