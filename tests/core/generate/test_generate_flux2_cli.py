"""``loadout generate --diffusion-model flux-2-klein-4b.safetensors --text-encoder qwen_3_4b.safetensors
--vae flux2-vae.safetensors`` makes a picture: files as artists have them (Comfy-Org's layouts; the
Qwen3 encoder at its real 2560 width and vocabulary with klein's 27 tapped layers, narrow MLPs; a
narrow FLUX.2 transformer and VAE), through detection, the loaders, the session and the CLI, equal
to the same parts composed by hand (the composition `test_parity_flux2.py` proves against
diffusers' Flux2KleinPipeline), at klein's usual settings (4 steps, CFG 1, euler, simple)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from app.cli import main
from core.archs.catalog import TEXTS, codec_for
from core.archs.llm.towers import KLEIN_QWEN3
from core.archs.protocols import ExtraInputs
from core.detect.catalog import diffusion_spec
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters, to_uint8_rgb
from core.generate.references import references_in
from core.loading.loader import inspect_for_loading, load_diffusion_model, load_text_encoder, load_vae
from core.models.llm import LlmConfig
from core.sampling import SamplingRequest, empty_latent, latent_format_for, sample
from core.sampling.model_sampling import from_spec
from core.sampling.network import NetworkAdapter
from core.text.llm import LlmTower
from tests.core.generate.reference_flux2 import flux2_reference, flux2_vae_reference, ours_from, vae_from
from tests.fixtures.drawn import landscape
from tests.fixtures.llm_files import random_state, write_comfy

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

PROMPT, SEED, FAMILY = "a red fox in the snow", 7, "flux2-klein-4b"


def _files(folder: Path) -> tuple[Path, Path, Path]:
    cfg = LlmConfig.preset("qwen3-4b")
    cfg = dataclasses.replace(cfg, num_layers=27, num_heads=2, num_kv_heads=1, intermediate_size=64)
    text = write_comfy(folder / "qwen_3_4b.safetensors", random_state(cfg))
    dit = ours_from(flux2_reference(heads=2, context=3 * 2560, seed=61))
    model = folder / "flux-2-klein-4b.safetensors"
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in dit.state_dict().items()}, str(model))
    vae = vae_from(flux2_vae_reference(base=32, seed=62))
    ae = folder / "flux2-vae.safetensors"
    save_file({k: v.contiguous() for k, v in vae.state_dict().items()}, str(ae))
    return model, text, ae


def _by_hand(model: Path, text: Path, ae: Path, reference: Path | None = None) -> np.ndarray:
    """The parts composed by hand; ``reference``: a picture encoded at its own size (a multiple of
    16) and put in the prompt's conditioning (ComfyUI's VAEEncode -> ReferenceLatent)."""
    spec = diffusion_spec(FAMILY)
    assert spec.text is not None
    convention = TEXTS[spec.text]
    tower = LlmTower.from_file(load_text_encoder(text).module, KLEIN_QWEN3, text)  # type: ignore[arg-type]
    cond = convention.network_inputs(
        convention.combine({"qwen3_4b": tower.encode(PROMPT)}), ExtraInputs(64, 64)
    )
    fmt, codec, vae = latent_format_for(FAMILY), codec_for(FAMILY), load_vae(ae).module
    if reference is not None:
        rgb = np.array(Image.open(reference).convert("RGB"))
        pixels = torch.from_numpy(rgb).permute(2, 0, 1)[None].float() / 255
        with torch.no_grad():
            cond = dataclasses.replace(cond, references=(fmt.process_in(codec.encode(vae, pixels * 2 - 1)),))
    request = SamplingRequest(SEED, steps=4, cfg=1.0, sampler="euler", scheduler="simple")
    dit = load_diffusion_model(model).module
    latent = sample(
        NetworkAdapter(dit, convention="flux2"), from_spec(spec.sampling, FAMILY), fmt,
        empty_latent(1, 64, 64, fmt), cond, None, request,
    )  # fmt: skip
    with torch.no_grad():
        pixels = codec.decode(vae, latent)
    return to_uint8_rgb(pixels[0].float())


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return _files(tmp_path_factory.mktemp("flux2"))


def test_each_file_is_detected(files: tuple[Path, Path, Path]) -> None:
    model, text, ae = files
    found = {p.name: inspect_for_loading(p)[1] for p in (model, text, ae)}
    assert (found[model.name].kind, found[model.name].family) == ("diffusion_model", FAMILY)
    assert (found[text.name].kind, found[text.name].family) == ("text_encoder", "qwen3-4b")
    assert (found[ae.name].kind, found[ae.name].family) == ("vae", "vae-flux2")


def test_loadout_generate_makes_a_klein_picture(
    files: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, text, ae = files
    out = tmp_path / "fox.png"
    args = [
        "generate", "--diffusion-model", str(model), "--text-encoder", str(text), "--vae", str(ae),
        "--prompt", PROMPT, "--steps", "4", "--cfg", "1", "--sampler", "euler", "--scheduler", "simple",
        "--size", "64x64", "--seed", str(SEED), "-o", str(out), "--json", "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == [str(out)]
    image = Image.open(out)
    params = image.text["parameters"]
    assert "Model: flux-2-klein-4b" in params and "Steps: 4" in params
    got = np.asarray(image.convert("RGB")).astype(np.int32)
    want = _by_hand(model, text, ae).astype(np.int32)
    assert got.std() > 5 and np.abs(got - want).max() <= 1


def test_loadout_generate_edits_a_picture_with_klein(
    files: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--reference fox.png --keep-reference-size``: the picture encoded at its own 96 x 64 (not
    ComfyUI's ImageScaleToTotalPixels megapixel, the default), named in the PNG parameters."""
    model, text, ae = files
    ref, out = landscape(tmp_path / "fox.png", 96, 64), tmp_path / "edit.png"
    args = [
        "generate", "--diffusion-model", str(model), "--text-encoder", str(text), "--vae", str(ae),
        "--prompt", PROMPT, "--steps", "4", "--cfg", "1", "--sampler", "euler", "--scheduler", "simple",
        "--size", "64x64", "--seed", str(SEED), "--reference", str(ref), "--keep-reference-size",
        "-o", str(out), "--json", "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["images"] == [str(out)]
    p = parse_parameters(read_png_parameters(out))
    digest = hashlib.sha256(ref.read_bytes()).hexdigest()[:12]
    assert [(r.name, r.hash) for r in references_in(p.extra)] == [("fox.png", digest)]
    assert p.extra["Reference size"] == "own"
    got = np.asarray(Image.open(out).convert("RGB")).astype(np.int32)
    want = _by_hand(model, text, ae, ref).astype(np.int32)
    without = _by_hand(model, text, ae).astype(np.int32)
    off, moved = int(np.abs(got - want).sum()), int(np.abs(got - without).sum())
    print(f"klein edit by the CLI: {off} levels off the engine's, {moved} off the unedited picture's")
    # the narrow random network's prompt tokens outweigh the reference's 24: it moves pixels by a level
    assert got.std() > 5 and np.abs(got - want).max() <= 1 and moved > 10 * off
