"""The whole PixArt-Σ path against diffusers' PixArtSigmaPipeline, and PixArt-α's against its
PixArtAlphaPipeline (test-only references).

Tiny real-architecture networks with random weights run in both: a T5 v1.1 encoder (4096 wide, as
T5-XXL, with a real SentencePiece vocabulary trained here), a PixArtTransformer2DModel the Σ way
(no size micro-conditions, learned sigma) and an SDXL-scaled AutoencoderKL; ours are loaded from
their state dicts, and, for the session test, from safetensors files through detection and the
public loaders. diffusers is set up the way ComfyUI computes (docs/generate.md, docs/families.md):

- ComfyUI's PixArt table (betas linear from 1e-4 to 0.02, its "sqrt_linear"; diffusers' "linear"),
  its sigmas and nearest-index timesteps (``discrete_comfy_schedule``), its CPU noise;
- T5: ComfyUI tokenizes without padding or truncation and gives the network no attention mask (an
  empty negative prompt is the end token alone); diffusers pads to 300 tokens and masks the padding
  out of T5 and of the cross-attention (a -10000 bias: exactly zero weight in fp32), which is the
  same computation on the same tokens. diffusers lower-cases the prompt (no ``clean_caption``): the
  prompts here are lower case;
- no resolution binning (diffusers would resize to its aspect-ratio table and back);
- PixArt-α's size micro-conditions: ComfyUI gives the picture's height, width and height / width;
  diffusers the same, but only for a transformer configured for 1024 pictures (sample size 128),
  so the tiny one is told it is (``register_to_config``: its modules keep their 64-latent grid).

The latent's mean side is 34..36 here: ComfyUI's position grid for it (interpolation 1, base 32
tokens) is diffusers' for a 64-latent sample size at interpolation 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from core.files.writer import write_safetensors
from core.generate.generator import Generator
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline
from core.generate.png import to_uint8_rgb
from core.generate.request import ImageSettings, Sampling
from core.generate.session_run import Output
from core.loading.loader import inspect_for_loading
from core.memory.devices import cpu_device
from core.memory.policy import MemorySettings, VramState
from core.models.vae import SD1_LATENT, SDXL_LATENT
from core.sampling import for_family
from core.session import Placement, PlacementConfig, Session
from core.text.conditioning import TextEncoders
from tests.core.generate.reference import (
    PIXART_TABLE,
    discrete_comfy_schedule,
    discrete_scheduler,
    pixart_pair,
    t5_pair,
    t5_tokenizers,
    to_unit_image,
    vae_pair,
)

diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.usefixtures("one_thread")]

T5_WIDTH = 4096
FAMILY = "pixart-sigma"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Networks, Any, Path]:
    folder = tmp_path_factory.mktemp("t5")
    our_t5_tok, hf_t5_tok = t5_tokenizers(folder)
    hf_t5, t5 = t5_pair(T5_WIDTH, vocab=len(hf_t5_tok), seed=51)
    hf_dit, dit = pixart_pair(T5_WIDTH, seed=52)
    hf_vae, vae = vae_pair(4, SDXL_LATENT, seed=53, base=8)
    pipe = diffusers.PixArtSigmaPipeline(
        tokenizer=hf_t5_tok, text_encoder=hf_t5, vae=hf_vae, transformer=hf_dit,
        scheduler=discrete_scheduler("euler", PIXART_TABLE),
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return pipe, Networks(FAMILY, dit, TextEncoders(t5=t5), vae), our_t5_tok, folder / "spiece.model"


@pytest.fixture(scope="module")
def alpha_pair(pair: tuple[Any, Networks, Any, Path]) -> tuple[Any, Networks]:
    sigma_pipe, sigma_nets, _, _ = pair
    hf_dit, dit = pixart_pair(T5_WIDTH, seed=56, alpha=True)
    hf_dit.register_to_config(sample_size=128)  # diffusers passes the micro-conditions only then
    hf_vae, vae = vae_pair(4, SD1_LATENT, seed=57, base=8)
    pipe = diffusers.PixArtAlphaPipeline(
        tokenizer=sigma_pipe.tokenizer, text_encoder=sigma_pipe.text_encoder, vae=hf_vae, transformer=hf_dit,
        scheduler=discrete_scheduler("euler", PIXART_TABLE),
    )  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    return pipe, Networks("pixart-alpha", dit, sigma_nets.text, vae)


def _diffusers_image(pipe: Any, settings: ImageSettings, family: str = FAMILY) -> np.ndarray:
    s = settings.sampling
    pipe.scheduler = discrete_scheduler(s.sampler, PIXART_TABLE)
    schedule = discrete_comfy_schedule(pipe.scheduler, for_family(family), s.sampler, s.scheduler, s.steps)
    with schedule as sigmas:
        noise = torch.randn(
            (settings.batch, 4, settings.height // 8, settings.width // 8),
            generator=torch.Generator("cpu").manual_seed(s.seed),
        )
        out = pipe(
            settings.prompt, negative_prompt=settings.negative, num_inference_steps=s.steps,
            guidance_scale=s.cfg, latents=noise, height=settings.height, width=settings.width,
            output_type="np", sigmas=sigmas, clean_caption=False, use_resolution_binning=False,
        )  # fmt: skip
    return np.asarray(out.images)


def _settings(negative: str, sampler: str, scheduler: str, seed: int) -> ImageSettings:
    return ImageSettings(
        prompt="a tiny red fox, forest", negative=negative, width=272, height=288,
        sampling=Sampling(seed=seed, steps=4, cfg=4.5, sampler=sampler, scheduler=scheduler),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("negative", "sampler", "scheduler", "seed"),
    [
        ("blurry, low quality", "euler", "karras", 0),
        ("", "dpmpp_2m", "karras", 7),
        ("", "euler", "normal", 3),
    ],
)
def test_run_equals_diffusers_set_up_as_comfyui(
    pair: tuple[Any, Networks, Any, Path], negative: str, sampler: str, scheduler: str, seed: int
) -> None:
    pipe, nets, t5_tok, _ = pair
    settings = _settings(negative, sampler, scheduler, seed)
    pipeline = Pipeline(nets, Compute(), t5_tokenizer=t5_tok)
    assert pipeline.cfg(ImageSettings(prompt="x")) == 4.5  # PixArt-Σ's default CFG
    pixels, _, _ = pipeline.run(settings, Hooks())
    ours = to_unit_image(pixels)
    theirs = _diffusers_image(pipe, settings)
    err = float(np.abs(ours - theirs).max())
    print(
        f"pixart-sigma {sampler} {scheduler} seed {seed} neg {negative!r}: max |ours - diffusers| = {err:.1e}"
    )
    assert ours.shape == theirs.shape == (1, 288, 272, 3)
    assert err < 2e-5
    assert float(ours.std()) > 0.05


def test_alpha_run_equals_diffusers_set_up_as_comfyui(
    pair: tuple[Any, Networks, Any, Path], alpha_pair: tuple[Any, Networks]
) -> None:
    """PixArt-α: the same path with SD1's latent format and the size micro-conditions."""
    pipe, nets = alpha_pair
    settings = _settings("blurry", "euler", "karras", 5)
    pixels, _, _ = Pipeline(nets, Compute(), t5_tokenizer=pair[2]).run(settings, Hooks())
    ours = to_unit_image(pixels)
    theirs = _diffusers_image(pipe, settings, "pixart-alpha")
    err = float(np.abs(ours - theirs).max())
    print(f"pixart-alpha euler karras seed 5: max |ours - diffusers| = {err:.1e}")
    assert ours.shape == theirs.shape == (1, 288, 272, 3)
    assert err < 2e-5
    assert float(ours.std()) > 0.05


def test_prompt_encoding_is_diffusers_without_the_padding(pair: tuple[Any, Networks, Any, Path]) -> None:
    """ComfyUI's PixArt conditioning (the tokens and the end token, unpadded; an empty prompt is
    the end token alone) is diffusers' masked encoding with its padding cut off."""
    pipe, nets, t5_tok, _ = pair
    settings = ImageSettings(prompt="a tiny red fox, forest", negative="", width=272, height=288)
    pos, neg, _ = Pipeline(nets, Compute(), t5_tokenizer=t5_tok).encode_prompts(settings, Hooks())
    assert neg is not None and pos.pooled is None and neg.context.shape == (1, 1, T5_WIDTH)
    with torch.no_grad():
        ctx, mask, neg_ctx, neg_mask = pipe.encode_prompt(
            settings.prompt, negative_prompt="", device="cpu", clean_caption=False
        )
    for ours, theirs, keep in ((pos.context, ctx, mask), (neg.context, neg_ctx, neg_mask)):
        n = int(keep.sum())
        assert ours.shape[1] == n and bool(keep[0, :n].all())
        assert float((ours - theirs[:, :n]).abs().max() / theirs[:, :n].abs().max()) < 1e-5


def test_files_generate_through_a_session(tmp_path: Path, pair: tuple[Any, Networks, Any, Path]) -> None:
    """The loaded path: a transformer file in the original layout (with its 300-token null caption),
    a T5 file and a VAE file, each detected, loaded and placed by a session, give the picture the
    in-memory networks give (as its PNG stores it). Loading reads from no tensor a VAE's norm groups
    (32) or T5's relative-attention distance (128): the networks here have those."""
    pipe, nets, t5_tok, spiece = pair
    t5 = t5_pair(T5_WIDTH, vocab=len(pipe.tokenizer), seed=55, max_distance=128)[1]
    nets = Networks(FAMILY, nets.diffusion, TextEncoders(t5=t5), vae_pair(4, SDXL_LATENT, seed=54)[1])
    state = dict(nets.diffusion.state_dict())
    state["y_embedder.y_embedding"] = torch.zeros(300, T5_WIDTH)
    files = {
        "diffusion_model": write_safetensors(tmp_path / "pixart-sigma-tiny.safetensors", state),
        "text_encoder": write_safetensors(tmp_path / "t5xxl-tiny.safetensors", t5.state_dict()),
        "vae": write_safetensors(tmp_path / "sdxl-vae-tiny.safetensors", nets.vae.state_dict()),
    }
    families = {kind: inspect_for_loading(path)[1].family for kind, path in files.items()}
    assert families == {"diffusion_model": FAMILY, "text_encoder": "t5-xxl", "vae": "vae-sd"}
    # a card with room for the whole decode (a tiled one would differ at the seams)
    card = PlacementConfig(
        MemorySettings(vram_state=VramState.NORMAL_VRAM, reserve_bytes=0), 1 << 30, 1 << 20
    )
    session = Session(Placement(cpu_device(0), card, cpu_is_device=True))
    for kind, path in files.items():
        session.load(path, kind, lambda p: None, lambda: None)
    settings = _settings("blurry", "euler", "karras", 11)
    result = Generator(session, t5_tokenizer=spiece).generate(
        settings, Output(tmp_path / "out.png"), lambda p: None, session.placement.manager.check
    )
    with Image.open(result.images[0].path) as im:
        got = np.asarray(im.convert("RGB"))
    pixels, _, _ = Pipeline(nets, Compute(), t5_tokenizer=t5_tok).run(settings, Hooks())
    want = to_uint8_rgb(pixels[0])
    assert got.shape == want.shape == (288, 272, 3)
    assert int(np.abs(got.astype(int) - want.astype(int)).max()) <= 1


def test_noise_table_is_diffusers_linear_betas() -> None:
    """The run above pins diffusers to our sigmas; this checks the table itself: ComfyUI's
    "sqrt_linear" 1e-4..0.02 is diffusers' "linear" (not SD's scaled-linear table)."""
    sched = discrete_scheduler("euler", PIXART_TABLE)
    want = ((1 - sched.alphas_cumprod) / sched.alphas_cumprod) ** 0.5
    ours = for_family(FAMILY).sigmas
    # diffusers builds its betas in float32, ComfyUI in float64: 8e-5 apart at the smallest sigmas
    assert float(((ours - want) / want).abs().max()) < 2e-4
    assert float(ours[-1]) > 150 > float(for_family("sdxl").sigmas[-1])  # PixArt's sigma_max ~157, SD's ~14.6
