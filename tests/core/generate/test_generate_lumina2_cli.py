"""``loadout generate --diffusion-model lumina_2.safetensors --text-encoder gemma_2_2b.safetensors
--vae ae.safetensors`` makes a Lumina 2 picture with the family's usual settings (its record: 25
steps, CFG 4, ``res_multistep``, ``simple``; no --steps/--cfg/--sampler/--scheduler given): files as
artists have them (Comfy-Org's Gemma-2 at its real 2304 width with its SentencePiece model inside as
``spiece_model``, a small Lumina 2 in the original layout, a Flux-format VAE), through detection, the
loaders, the session and the CLI, equal to the same parts composed by hand (the composition
`test_parity_nextdit.py` proves against diffusers' Lumina2Pipeline). The Z-Image Turbo defaults
(8 steps, CFG 1, res_multistep, simple) reach a request the same way."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from app.cli import build_parser, main
from app.commands.generate_cmd import _request
from core.archs.catalog import TEXTS
from core.archs.protocols import ExtraInputs
from core.detect.catalog import diffusion_spec, generation_defaults
from core.generate.png import to_uint8_rgb
from core.generate.request import with_family_defaults
from core.loading.loader import load_diffusion_model, load_text_encoder, load_vae
from core.models.llm import LlmConfig
from core.models.vae import FLUX_LATENT
from core.sampling import SamplingRequest, empty_latent, latent_format_for, sample
from core.sampling.model_sampling import from_spec
from core.sampling.network import NetworkAdapter
from core.text.llm import LUMINA2_GEMMA2, LlmTower
from tests.core.generate.reference import vae_pair
from tests.core.generate.reference_nextdit import lumina2_reference, ours_from
from tests.core.text.llm.spm_model import gemma_like_spm
from tests.fixtures.llm_files import random_state, write_comfy

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

PROMPT, SEED = "a red fox in the snow", 7


def _files(folder: Path) -> tuple[Path, Path, Path]:
    cfg = LlmConfig.preset("gemma2-2b")
    cfg = dataclasses.replace(
        cfg, vocab_size=768, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=256
    )
    spiece = {"spiece_model": torch.frombuffer(bytearray(gemma_like_spm()), dtype=torch.uint8)}
    text = write_comfy(folder / "gemma_2_2b.safetensors", random_state(cfg), extra=spiece)
    dit = ours_from(lumina2_reference(dim=192, heads=2, kv_heads=1, layers=2, refiners=2, cap=2304, seed=3))
    model = folder / "lumina_2_model_bf16.safetensors"
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in dit.state_dict().items()}, str(model))
    _, vae = vae_pair(16, FLUX_LATENT, seed=4)
    ae = folder / "ae.safetensors"
    save_file({k: v.contiguous() for k, v in vae.state_dict().items()}, str(ae))
    return model, text, ae


def _by_hand(model: Path, text: Path, ae: Path) -> np.ndarray:
    spec = diffusion_spec("lumina2")
    assert spec.text is not None
    convention = TEXTS[spec.text]
    tower = LlmTower.from_file(load_text_encoder(text).module, LUMINA2_GEMMA2, text)  # type: ignore[arg-type]

    def cond(prompt: str) -> object:
        return convention.network_inputs(
            convention.combine({"gemma2_2b": tower.encode(prompt)}), ExtraInputs(64, 64)
        )

    fmt = latent_format_for("lumina2")
    request = SamplingRequest(SEED, steps=25, cfg=4.0, sampler="res_multistep", scheduler="simple")
    dit = load_diffusion_model(model).module
    latent = sample(
        NetworkAdapter(dit, convention="nextdit"), from_spec(spec.sampling, "lumina2"), fmt,
        empty_latent(1, 64, 64, fmt), cond(PROMPT), cond(""), request,  # type: ignore[arg-type]
    )  # fmt: skip
    with torch.no_grad():
        pixels = load_vae(ae).module.decode(latent, scaled=False)
    return to_uint8_rgb(pixels[0].float())


def test_loadout_generate_makes_a_lumina2_picture_with_the_family_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, text, ae = _files(tmp_path)
    out = tmp_path / "fox.png"
    args = [
        "generate", "--diffusion-model", str(model), "--text-encoder", str(text), "--vae", str(ae),
        "--prompt", PROMPT, "--size", "64x64", "--seed", str(SEED), "-o", str(out), "--json", "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["images"] == [str(out)]
    image = Image.open(out)
    parameters = image.text["parameters"]
    assert "Steps: 25" in parameters and "Sampler: res_multistep" in parameters, parameters
    assert "CFG scale: 4" in parameters
    got = np.asarray(image.convert("RGB")).astype(np.int32)
    want = _by_hand(model, text, ae).astype(np.int32)
    assert got.std() > 5 and np.abs(got - want).max() <= 1


def test_settings_not_given_come_from_the_family_record() -> None:
    base = ["generate", "m.safetensors", "--prompt", "a fox", "-o", "fox.png"]
    request = _request(build_parser().parse_args(base))
    assert request.family_defaults == ("steps", "sampler", "scheduler", "patches")
    turbo = with_family_defaults(request.image, generation_defaults("z-image"), request.family_defaults)
    s = turbo.sampling
    assert (s.steps, s.sampler, s.scheduler, s.cfg) == (
        8,
        "res_multistep",
        "simple",
        None,
    )  # CFG: the record's 1
    assert diffusion_spec("z-image").defaults.cfg == 1.0
    sd1 = with_family_defaults(request.image, generation_defaults("sd1"), request.family_defaults)
    assert (sd1.sampling.steps, sd1.sampling.sampler, sd1.sampling.scheduler) == (20, "euler", "normal")
    given = _request(build_parser().parse_args([*base, "--steps", "3", "--sampler", "dpmpp_2m"]))
    assert given.family_defaults == ("scheduler", "patches")
    mine = with_family_defaults(given.image, generation_defaults("z-image"), given.family_defaults).sampling
    assert (mine.steps, mine.sampler, mine.scheduler) == (3, "dpmpp_2m", "simple")


def test_a_grid_axis_keeps_its_own_values_over_the_family_record() -> None:
    from core.queue.grid import Axis, cells

    base = ["generate", "m.safetensors", "--prompt", "a fox", "-o", "fox.png"]
    request = _request(build_parser().parse_args(base))
    grid = cells(request, Axis("steps", (3, 5)))
    assert [c.request.image.sampling.steps for c in grid] == [3, 5]
    assert all(c.request.family_defaults == ("sampler", "scheduler", "patches") for c in grid)
    image = with_family_defaults(
        grid[0].request.image, generation_defaults("z-image"), grid[0].request.family_defaults
    )
    assert (image.sampling.steps, image.sampling.sampler) == (3, "res_multistep")
