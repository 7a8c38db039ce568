"""Shared parts of the pipeline-parity tests: tiny reference networks (diffusers/transformers, random
weights) with their twins in our layout, tokenizers both sides read the same way, and diffusers'
schedulers pinned to ComfyUI's sigmas and timesteps.

Every setting here removes one documented difference between ComfyUI and diffusers (docs/generate.md);
none changes what our pipeline computes.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from core.archs.pixart.network import PixArt, PixArtConfig
from core.loading.convert.dit_diffusers import pixart_diffusers_to_original
from core.loading.convert.vae_diffusers import vae_diffusers_to_original
from core.models.clip import CLIPTextConfig, CLIPTextModel
from core.models.t5 import T5Config, T5Encoder
from core.models.vae import AutoencoderKL, LatentFormat, VAEConfig
from core.sampling import ModelSampling, ksampler_sigmas
from core.text.t5_tokenizer import T5Tokenizer
from core.text.vocab import load_vocabulary

VOCAB = 49408
END = 49407


def randomize(model: nn.Module, seed: int) -> nn.Module:
    """Weights of a trained network's scale (unit-variance activations), off every init value."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * noise)
            elif p.ndim >= 2:
                p.copy_(noise / math.sqrt(p[0].numel()))
            else:
                p.copy_(0.1 * noise)
    return model.eval()


def tame_output(layer: nn.Module, scale: float = 0.05) -> None:
    """Shrink a random network's output layer so that it predicts velocities of a trained model's
    size (about 1, not about 20). Otherwise each of the few sampling steps, times CFG, multiplies the
    two libraries' last-bit rounding differences by ~20 x cfg and a 5-step run drifts apart by
    1e-3: a chaotic test, not a difference in the computation."""
    with torch.no_grad():
        for p in layer.parameters():
            p.mul_(scale)


def to_unit_image(pixels: Tensor) -> np.ndarray:
    """Our pipeline's [-1, 1] (B, 3, H, W) pixels as diffusers' ``output_type="np"`` gives them."""
    return ((pixels + 1) / 2).clamp(0, 1).permute(0, 2, 3, 1).numpy()


# -- tokenizers -------------------------------------------------------------------------------------


def clip_tokenizer(folder: Path, *, pad_with_end: bool) -> Any:
    """transformers' CLIPTokenizer on open_clip's vocabulary (ComfyUI's tokenizer): CLIP-L pads with
    the end token, OpenCLIP-G with token 0 ("!"), as ComfyUI's SDTokenizer / SDXLClipGTokenizer do."""
    import transformers

    v = load_vocabulary()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(v.vocab), encoding="utf-8")
    merges = "\n".join(f"{a} {b}" for a, b in v.merges)
    (folder / "merges.txt").write_text(f"#version: 0.2\n{merges}\n", encoding="utf-8")
    pad = "<|endoftext|>" if pad_with_end else "!"
    tok = transformers.CLIPTokenizer.from_pretrained(str(folder), pad_token=pad, model_max_length=77)
    assert tok.pad_token_id == (END if pad_with_end else 0)
    return tok


T5_CORPUS = [
    "a photo of a cat sitting on a red chair, highly detailed",
    "portrait of an astronaut, cinematic lighting, 35mm film",
    "a tiny red fox in a forest, blurry, low quality",
    "masterpiece, best quality, ultra sharp",
] * 40


def t5_tokenizers(folder: Path) -> tuple[T5Tokenizer, Any]:
    """A real SentencePiece unigram model trained here, read by ours and by transformers' T5Tokenizer
    (pad 0, end 1, unknown 2, no sentinel ids): the same ids for the same text."""
    import sentencepiece
    import transformers

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(T5_CORPUS), model_writer=model, vocab_size=48, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=1.0, minloglevel=2,
    )  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spiece.model"
    path.write_bytes(model.getvalue())
    sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    return T5Tokenizer(path), transformers.T5Tokenizer(vocab=pieces, extra_ids=0)


# -- text towers ------------------------------------------------------------------------------------


def clip_pair(width: int, *, act: str, projection: int | None, seed: int) -> tuple[Any, CLIPTextModel]:
    """A transformers CLIP text tower (with a projection when ``projection``) and ours with its
    weights (each its own copy)."""
    import transformers

    hf_config = transformers.CLIPTextConfig(
        vocab_size=VOCAB, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=3,
        num_attention_heads=4, max_position_embeddings=77, hidden_act=act, projection_dim=projection or width,
        eos_token_id=END, bos_token_id=END - 1, pad_token_id=END, attn_implementation="eager",
    )  # fmt: skip
    cls = transformers.CLIPTextModelWithProjection if projection else transformers.CLIPTextModel
    hf = randomize(cls(hf_config), seed)
    ours = CLIPTextModel(
        CLIPTextConfig(
            hidden_size=width, intermediate_size=2 * width, num_layers=3, num_heads=4, hidden_act=act,  # type: ignore[arg-type]
            projection_dim=projection,
        )
    )  # fmt: skip
    state = {
        k if k.startswith(("text_model.", "text_projection")) else f"text_model.{k}": v
        for k, v in hf.state_dict().items()
    }
    ours.load_state_dict(state, strict=True)
    return hf, ours.eval()


def t5_pair(d_model: int, vocab: int, seed: int, *, max_distance: int = 20) -> tuple[Any, T5Encoder]:
    """transformers' T5EncoderModel (v1.1: gated GELU) and ours; ``d_model`` is the context width.
    ``max_distance``: 128 (T5's) for a file loaded back (no tensor stores it)."""
    import transformers

    cfg = T5Config(
        vocab_size=vocab, d_model=d_model, d_kv=8, d_ff=32, num_layers=2, num_heads=2,
        relative_attention_num_buckets=8, relative_attention_max_distance=max_distance,
    )  # fmt: skip
    hf = transformers.T5EncoderModel(
        transformers.T5Config(
            vocab_size=vocab, d_model=d_model, d_kv=8, d_ff=32, num_layers=2, num_heads=2,
            relative_attention_num_buckets=8, relative_attention_max_distance=max_distance,
            feed_forward_proj="gated-gelu", attn_implementation="eager",
        )
    )  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # embeddings of unit scale (T5 has no input norm before the first block)
        for name, p in hf.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("layer_norm.weight"):
                p.copy_(1 + 0.1 * noise)
            elif "embed" in name or "shared" in name or "relative" in name:
                p.copy_(noise)
            else:
                p.copy_(noise / math.sqrt(p.shape[1]))
    hf.eval()
    ours = T5Encoder(cfg)
    ours.load_state_dict(hf.state_dict(), strict=True)
    return hf, ours.eval()


# -- schedulers -------------------------------------------------------------------------------------

#: SD1/SDXL's noise table as diffusers spells it
SD_TABLE: dict[str, Any] = {
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "num_train_timesteps": 1000,
}


#: PixArt's noise table as diffusers spells it (ComfyUI: "sqrt_linear", 0.0001..0.02)
PIXART_TABLE: dict[str, Any] = {
    "beta_start": 0.0001,
    "beta_end": 0.02,
    "beta_schedule": "linear",
    "num_train_timesteps": 1000,
}


def discrete_scheduler(sampler: str, table: dict[str, Any] = SD_TABLE) -> Any:
    """diffusers' counterpart of a ComfyUI sampler on SD1/SDXL's noise table.

    euler: "leading" spacing only so that diffusers scales the first latent by sqrt(1 + sigma_max^2)
    as ComfyUI does ("linspace" uses sigma_max alone). dpmpp_2m: ComfyUI's is the data-prediction,
    second-order, midpoint multistep solver whose last step (to sigma 0) is first order;
    ``final_sigmas_type="zero"`` makes diffusers' last step first order at any step count
    (``lower_order_final`` alone does so only under 15 steps). DPM-Solver keeps its latent on the
    variance-preserving scale, so its first latent is the noise itself (``init_noise_sigma`` 1), which
    is ComfyUI's noise * sqrt(1 + sigma_max^2) seen on that scale. The sigmas themselves are ComfyUI's
    (:func:`discrete_comfy_schedule`).
    """
    import diffusers

    if sampler == "euler":
        return diffusers.EulerDiscreteScheduler(**table, timestep_spacing="leading", steps_offset=1)
    if sampler == "dpmpp_2m":
        return diffusers.DPMSolverMultistepScheduler(
            **table, algorithm_type="dpmsolver++", solver_order=2, solver_type="midpoint",
            final_sigmas_type="zero", lower_order_final=True, euler_at_final=False,
        )  # fmt: skip
    raise ValueError(f"no diffusers counterpart is set up for {sampler!r}")


@contextmanager
def discrete_comfy_schedule(
    scheduler: Any, ms: ModelSampling, sampler: str, schedule: str, steps: int
) -> Iterator[list[float]]:
    """Pin a diffusers discrete scheduler (Euler, DPM-Solver) to ComfyUI's sigmas and to ComfyUI's
    timesteps (the *nearest* table index of each sigma; diffusers interpolates a fractional one).
    Yields the sigmas to hand the pipeline (``sigmas=``), so that it calls ``set_timesteps`` with
    custom sigmas (it checks for a ``sigmas`` parameter, which DPM-Solver's own lacks).
    """
    pinned_sigmas = ksampler_sigmas(ms, schedule, sampler, steps)
    pinned_timesteps = ms.timestep(pinned_sigmas[:-1]).float()
    assert len(set(pinned_timesteps.tolist())) == steps  # diffusers finds its step index by the timestep
    original = scheduler.set_timesteps

    def set_timesteps(
        num_inference_steps: Any = None,
        device: Any = None,
        timesteps: Any = None,
        sigmas: Any = None,
        mu: Any = None,
    ) -> None:
        original(num_inference_steps=steps, device=device)  # resets the solver's state
        scheduler.sigmas = pinned_sigmas.clone()
        scheduler.timesteps = pinned_timesteps.to(device or "cpu")

    scheduler.set_timesteps = set_timesteps
    try:
        yield pinned_sigmas.tolist()
    finally:
        del scheduler.set_timesteps  # the class's method again


def pixart_pair(
    caption_channels: int, seed: int, *, alpha: bool = False, depth: int = 2
) -> tuple[Any, PixArt]:
    """diffusers' PixArtTransformer2DModel the Σ way (no size micro-conditions, learned sigma), or
    the α way (``alpha``: with them), at a tiny width (16 heads of 2, or of 3 for α, whose size
    embeddings are a third of the width each: ComfyUI reads no head count, every PixArt has 16), and
    ours loaded from its converted state dict. Its base position grid is 32 tokens (64 latents) at
    interpolation 1, what ComfyUI computes for latents whose mean side is 33..95."""
    import diffusers

    head_dim = 3 if alpha else 2
    hf = diffusers.PixArtTransformer2DModel(
        num_attention_heads=16, attention_head_dim=head_dim, in_channels=4, out_channels=8, num_layers=depth,
        cross_attention_dim=16 * head_dim, sample_size=64, patch_size=2, interpolation_scale=1,
        caption_channels=caption_channels, use_additional_conditions=alpha,
    )  # fmt: skip
    randomize(hf, seed)
    tame_output(hf.proj_out)
    config = PixArtConfig(
        hidden_size=16 * head_dim, depth=depth, context_dim=caption_channels, micro_condition=alpha
    )
    ours = PixArt(config).eval()
    ours.load_state_dict(pixart_diffusers_to_original(hf.state_dict()), strict=True)
    return hf, ours


def vae_pair(
    latent_channels: int, fmt: LatentFormat, seed: int, *, base: int = 32
) -> tuple[Any, AutoencoderKL]:
    """diffusers' AutoencoderKL (4 levels: 8 pixels per latent) and ours with its weights; 16-channel
    VAEs (SD3, Flux) have no quant convs, as the released ones. ``base``: the first level's width
    (narrower for pictures of a few hundred pixels)."""
    import diffusers

    quant = latent_channels == 4
    cfg = VAEConfig(
        latent_channels=latent_channels, base_channels=base, channel_mult=(1, 2, 2, 2), num_res_blocks=1,
        norm_groups=min(base, 32), use_quant_conv=quant,
    ).with_latent_format(fmt)  # fmt: skip
    hf = diffusers.AutoencoderKL(
        block_out_channels=cfg.level_channels, down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4, layers_per_block=1, latent_channels=latent_channels,
        norm_num_groups=cfg.norm_groups, scaling_factor=cfg.scaling_factor,
        shift_factor=cfg.shift_factor or None, use_quant_conv=quant, use_post_quant_conv=quant,
    )  # fmt: skip
    randomize(hf, seed)
    ours = AutoencoderKL(cfg).eval()
    ours.load_state_dict(vae_diffusers_to_original(hf.state_dict(), cfg), strict=True)
    return hf, ours
