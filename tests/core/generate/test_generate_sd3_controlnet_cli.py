"""``loadout generate sd3_medium_incl_clips_t5xxlfp8.safetensors --controlnet FILE:HINT``
end to end: an SD3 all-in-one checkpoint as ComfyUI saves it (the MMDiT under
``model.diffusion_model.``, SD3's VAE, CLIP-L, CLIP-G and T5-XXL under ``text_encoders.``) and
InstantX's SD3 ControlNet file (diffusers' ``SD3ControlNetModel`` as ``save_pretrained`` writes it),
through detection, the loaders, the session's manager and the command.

Tiny widths with the real key names and the text encoders' real hidden widths (CLIP-L 768, CLIP-G
1280, T5-XXL 4096, CLIP's full vocabulary; CLIP-G's projection 32 wide, so the pooled vector is 800,
not 2048, to keep the simulated card small): the MMDiT and the ControlNet are 128 wide
(two heads of 64), so ComfyUI's block rule (depth = width / 64 = 2) holds as on SD3 Medium (1536
wide, 24 deep); the numerics at the real widths are test_controlnet_sd3_parity.py's, the whole run's
against diffusers test_parity_controlnet_sd3_pipeline.py's. The picture is finite, the PNG names the
ControlNet and reads back. On a small simulated card (the MMDiT and the ControlNet each partly
placed, room kept for the SD3 memory model's activations scaled to the 128-wide network) it is the
same bits as without a limit."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from app.demo import TINY_CLIP
from core.generate.workflows import ControlNetParameters, controlnets_in
from core.loading.architectures import CLIP, MMDIT, VAE
from core.models.mmdit import MMDiTConfig
from core.models.vae import SD3_LATENT, VAEConfig
from tests.core.generate.reference import t5_tokenizers
from tests.core.generate.sd3_controlnet_pair import diffusers_file, joint_controlnet
from tests.fixtures.cli_runs import generate
from tests.fixtures.controlnets import hint_picture
from tests.fixtures.st_files import write_tensors
from tests.fixtures.tiny_models import CLIP_G, TINY_T5, Tiny, comfy_te_extras

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("sentencepiece")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

CONTEXT, POOLED = 4096, 768 + CLIP_G.projection_dim
SD3_BASE = MMDiTConfig(
    depth=2, num_heads=2, head_dim=64, pos_embed_max_size=8, context_dim=CONTEXT, adm_in_channels=POOLED
)
HF = "transformers"
CLIP_G_FULL = dataclasses.replace(CLIP_G, vocab_size=TINY_CLIP.vocab_size)
#: SD3's VAE at 8 pixels a latent cell (four levels), narrow
VAE_SD3 = VAEConfig(
    latent_channels=16,
    base_channels=32,
    channel_mult=(1, 2, 2, 2),
    num_res_blocks=1,
    norm_groups=32,
    use_quant_conv=False,
).with_latent_format(SD3_LATENT)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sd3_cn")
    parts = {
        "model.diffusion_model.": Tiny("mmdit-sd3-text-widths", MMDIT, "sd3", SD3_BASE, seed=41),
        "first_stage_model.": Tiny("vae-sd3-8x", VAE, "vae-sd3", VAE_SD3, seed=45),
        "text_encoders.clip_l.transformer.": Tiny("clip-l", CLIP, "clip-l", TINY_CLIP, seed=42, layout=HF),
        "text_encoders.clip_g.transformer.": Tiny("clip-g", CLIP, "clip-g", CLIP_G_FULL, 43, layout=HF),
        "text_encoders.t5xxl.transformer.": TINY_T5,
    }  # fmt: skip
    tensors: dict[str, torch.Tensor] = dict(comfy_te_extras("sd3"))
    for prefix, tiny in parts.items():
        half = prefix.startswith("text_encoders.")  # fp16 text encoders, as the released file's
        tensors |= {prefix + k: v.half() if half else v for k, v in tiny.file_state().items()}
    cn = joint_controlnet(2, 1, context=CONTEXT, pooled=POOLED, seed=44)
    with torch.no_grad():  # residuals of a trained net's size next to the base's
        for block in cn.controlnet_blocks:
            block.weight.mul_(0.3)
    t5_tokenizers(root / "t5_tokenizer")
    return {
        "checkpoint": write_tensors(root / "sd3_medium_incl_clips_t5xxlfp8.safetensors", tensors),
        "controlnet": diffusers_file(cn, root / "SD3-Controlnet-Canny.safetensors"),
        "hint": hint_picture(root / "edges.png", 80, 64),
        "tokenizer": root / "t5_tokenizer",
    }


def _args(f: dict[str, Path]) -> list[str]:
    return [
        "generate", str(f["checkpoint"]), "--prompt", "a red fox", "--negative", "blurry",
        "--steps", "2", "--cfg", "3", "--sampler", "euler", "--scheduler", "simple", "--seed", "5",
        "--size", "64x64",
    ]  # fmt: skip


def test_sd3_controlnet_from_the_command_line(
    files: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    plain = generate(_args(files), tmp_path / "plain.png")
    made = generate(_args(files), tmp_path / "whole.png", *_net(files))
    whole = made.pixels
    assert np.isfinite(whole).all() and whole.std() > 5
    assert np.abs(whole - plain.pixels).max() > 2  # the ControlNet acted
    p = made.parameters
    assert controlnets_in(p.extra) == (ControlNetParameters("SD3-Controlnet-Canny", 0.8, 0.1, 0.9),)


def test_sd3_controlnet_on_a_small_card_is_the_same_bits(
    files: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    whole = generate(_args(files), tmp_path / "whole.png", *_net(files))
    card = generate(_args(files), tmp_path / "card.png", *_net(files), "--vram-limit", "8MiB", capsys=capsys)
    assert np.array_equal(card.pixels, whole.pixels)
    partial = {e["role"] for e in card.events if e["kind"] == "partial_load"}
    assert {"diffusion_model", "controlnet"} <= partial, partial


def _net(files: dict[str, Path]) -> tuple[str, str]:
    return ("--controlnet", f"{files['controlnet']}:{files['hint']}:0.8:0.1:0.9")
