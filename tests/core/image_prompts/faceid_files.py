"""FaceID IP-Adapter files in h94's layout (IP-Adapter-FaceID: the MLP projection
``image_proj.proj.0``/``proj.2``/``norm`` over the 512-wide face embedding, ``ip_adapter.N.to_k_ip`` /
``to_v_ip`` for each cross-attention, and the FaceID LoRA of every attention processor beside them,
``ip_adapter.N.to_q_lora.down.weight`` ...), random weights at real width; the LoRA also as the
separate ``_lora.safetensors`` file artists load with the LoRAs (kohya names of diffusers' modules:
``lora_unet_<attention>_to_q.lora_down.weight``, as h94 converted it); a FaceID Plus file (the face
resampler over ViT-H's 1280-wide penultimate states)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from tests.fixtures.st_files import write_tensors

RANK = 4


def _w(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=gen) / math.sqrt(shape[-1])


def _mlp(gen: torch.Generator, cross: int, tokens: int) -> dict[str, torch.Tensor]:
    return {
        "image_proj.proj.0.weight": _w(gen, 1024, 512),
        "image_proj.proj.0.bias": 0.1 * torch.randn(1024, generator=gen),
        "image_proj.proj.2.weight": _w(gen, tokens * cross, 1024),
        "image_proj.proj.2.bias": 0.1 * torch.randn(tokens * cross, generator=gen),
        "image_proj.norm.weight": 1 + 0.1 * torch.randn(cross, generator=gen),
        "image_proj.norm.bias": 0.1 * torch.randn(cross, generator=gen),
    }


def _face_resampler(
    gen: torch.Generator, cross: int, clip: int = 1280, depth: int = 4
) -> dict[str, torch.Tensor]:
    p = "image_proj.perceiver_resampler."
    heads = cross // 64
    inner = 64 * heads
    state = {
        f"{p}proj_in.weight": _w(gen, cross, clip),
        f"{p}proj_in.bias": 0.1 * torch.randn(cross, generator=gen),
        f"{p}proj_out.weight": _w(gen, cross, cross),
        f"{p}proj_out.bias": 0.1 * torch.randn(cross, generator=gen),
        f"{p}norm_out.weight": 1 + 0.1 * torch.randn(cross, generator=gen),
        f"{p}norm_out.bias": 0.1 * torch.randn(cross, generator=gen),
    }
    for i in range(depth):
        q = f"{p}layers.{i}."
        for n in ("0.norm1", "0.norm2", "1.0"):
            state[f"{q}{n}.weight"] = 1 + 0.1 * torch.randn(cross, generator=gen)
            state[f"{q}{n}.bias"] = 0.1 * torch.randn(cross, generator=gen)
        state[f"{q}0.to_q.weight"] = _w(gen, inner, cross)
        state[f"{q}0.to_kv.weight"] = _w(gen, 2 * inner, cross)
        state[f"{q}0.to_out.weight"] = _w(gen, cross, inner)
        state[f"{q}1.1.weight"] = _w(gen, 4 * cross, cross)
        state[f"{q}1.3.weight"] = _w(gen, cross, 4 * cross)
    return state


def attention_widths(hf_unet: Any) -> list[tuple[str, int, int]]:
    """Each attention processor of diffusers' UNet in its order: (name, inner width, key input width)."""
    out = []
    modules = dict(hf_unet.named_modules())
    for name in hf_unet.attn_processors:
        attn = modules[name.removesuffix(".processor")]
        out.append((name, int(attn.to_q.weight.shape[0]), int(attn.to_k.weight.shape[1])))
    return out


def faceid_file(
    path: Path, hf_unet: Any, cross: int, *, seed: int = 0, plus: bool = False, lora: bool = True
) -> Path:
    """A FaceID adapter for ``hf_unet``'s attention processors (plain: 4 tokens; ``plus``: the face
    resampler too); with its LoRA of every processor unless ``lora`` is False (the portrait layout)."""
    gen = torch.Generator().manual_seed(seed)
    state = _mlp(gen, cross, 4 if lora or plus else 16)
    if plus:
        state.update(_face_resampler(gen, cross))
    for n, (_, inner, kin) in enumerate(attention_widths(hf_unet)):
        if n % 2:
            state[f"ip_adapter.{n}.to_k_ip.weight"] = _w(gen, inner, cross)
            state[f"ip_adapter.{n}.to_v_ip.weight"] = _w(gen, inner, cross)
        if lora:
            for proj, width in (("to_q", inner), ("to_k", kin), ("to_v", kin), ("to_out", inner)):
                state[f"ip_adapter.{n}.{proj}_lora.down.weight"] = _w(gen, RANK, width)
                state[f"ip_adapter.{n}.{proj}_lora.up.weight"] = 0.5 * _w(gen, inner, RANK)
    return write_tensors(path, state)


def lora_file(path: Path, adapter: dict[str, torch.Tensor], hf_unet: Any) -> Path:
    """The FaceID LoRA of ``adapter`` as h94's separate ``_lora.safetensors`` (kohya names)."""
    names = [name.removesuffix(".processor").replace(".", "_") for name in hf_unet.attn_processors]
    out = {}
    for key, value in adapter.items():
        if "_lora." not in key:
            continue
        _, n, rest = key.split(".", 2)
        proj, _, factor = rest.partition("_lora.")
        kohya = f"lora_unet_{names[int(n)]}_{'to_out_0' if proj == 'to_out' else proj}"
        out[f"{kohya}.lora_{factor.split('.')[0]}.weight"] = value
    return write_tensors(path, out)


def split_state(flat: dict[str, torch.Tensor], *, lora: bool) -> dict[str, dict[str, torch.Tensor]]:
    """The file as diffusers' ``load_ip_adapter`` takes a dict; without its LoRA keys unless ``lora``
    (ComfyUI_IPAdapter_plus never applies them: the artist loads the LoRA file)."""
    out: dict[str, dict[str, torch.Tensor]] = {"image_proj": {}, "ip_adapter": {}}
    for key, value in flat.items():
        if "_lora." in key and not lora:
            continue
        head, rest = key.split(".", 1)
        out[head][rest] = value
    return out


def faceid_file_for(path: Path, inners: tuple[int, ...], *, plus: bool = False, seed: int = 0) -> Path:
    """A FaceID adapter (SD1.5 width) for a UNet whose cross-attentions have the inner widths
    ``inners`` in the adapter's order, with a LoRA on each (self- and cross-) attention as h94's."""
    gen = torch.Generator().manual_seed(seed)
    state = _mlp(gen, 768, 4)
    if plus:
        state.update(_face_resampler(gen, 768))
    for i, inner in enumerate(inners):
        for n, kin in ((2 * i, inner), (2 * i + 1, 768)):
            for proj, width in (("to_q", inner), ("to_k", kin), ("to_v", kin), ("to_out", inner)):
                state[f"ip_adapter.{n}.{proj}_lora.down.weight"] = _w(gen, RANK, width)
                state[f"ip_adapter.{n}.{proj}_lora.up.weight"] = 0.5 * _w(gen, inner, RANK)
        state[f"ip_adapter.{2 * i + 1}.to_k_ip.weight"] = _w(gen, inner, 768)
        state[f"ip_adapter.{2 * i + 1}.to_v_ip.weight"] = _w(gen, inner, 768)
    return write_tensors(path, state)
