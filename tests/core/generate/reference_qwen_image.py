"""Qwen-Image reference network for the parity tests: diffusers' ``QwenImageTransformer2DModel``
with random weights (built on the meta device, then filled, so a real-width model does not pay for
torch's init), and ours on the same tensors (no copy: a 3072-wide block is 1.4 GB in fp32)."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from core.models.qwen_image import QwenImageConfig, QwenImageDiT
from tests.core.generate.reference import tame_output


def _filled(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Weights of a trained network's scale: matrices by 1/sqrt(fan-in), norm weights about 1,
    biases about 0.1 (drawn in place: a 3072-wide block is 340M numbers)."""
    model.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 1 / math.sqrt(p[0].numel()), generator=gen)
            elif "norm" in name:
                p.normal_(1.0, 0.1, generator=gen)
            else:
                p.normal_(0.0, 0.1, generator=gen)
    return model.eval()


def qwen_image_reference(*, dim: int = 3072, heads: int = 24, layers: int = 1, seed: int = 0) -> Any:
    """diffusers' Qwen-Image transformer (128-channel heads: its rotary axes are fixed)."""
    import diffusers
    from diffusers.models.transformers.transformer_qwenimage import QwenEmbedRope

    with torch.device("meta"):
        hf = diffusers.QwenImageTransformer2DModel(
            num_layers=layers, num_attention_heads=heads, attention_head_dim=dim // heads
        )
    # its tables are made with the module: made again on the CPU
    hf.pos_embed = QwenEmbedRope(theta=10000, axes_dim=[16, 56, 56], scale_rope=True)
    _filled(hf, seed)
    tame_output(hf.proj_out)
    return hf


def ours_from(hf: Any) -> QwenImageDiT:
    """Ours on diffusers' tensors (the same keys: Qwen-Image was released in diffusers' naming)."""
    state = hf.state_dict()
    config = QwenImageConfig.from_shapes({k: tuple(v.shape) for k, v in state.items()})
    ours = QwenImageDiT(config, device="meta")
    ours.load_state_dict(state, assign=True, strict=True)
    return ours.eval()


def pack(x: torch.Tensor) -> torch.Tensor:
    """QwenImagePipeline's ``_pack_latents``: (B, C, H, W) -> (B, H/2 W/2, 4 C)."""
    b, c, h, w = x.shape
    return x.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // 2) * (w // 2), 4 * c)


def unpack(tokens: torch.Tensor, h: int, w: int) -> torch.Tensor:
    b, _, c4 = tokens.shape
    c = c4 // 4
    return tokens.view(b, h // 2, w // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


def qwen_image_velocity(hf: Any, x: torch.Tensor, sigma: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
    """QwenImagePipeline's ``model(x, t / 1000)`` (sigma), every text token attended."""
    b, _, h, w = x.shape
    mask = torch.ones(ctx.shape[:2], dtype=torch.long)
    with torch.no_grad():
        out = hf(pack(x), ctx, mask, sigma, img_shapes=[[(1, h // 2, w // 2)]] * b, return_dict=False)[0]
    return unpack(out, h, w)


def qwen_controlnet_reference(hf: Any, *, extra: int = 0, seed: int = 0) -> Any:
    """diffusers' ``QwenImageControlNetModel`` of one block beside ``hf`` (the transformer), its
    block the transformer's first (the same tensors: InstantX's nets start as the transformer's
    blocks; a second 3072-wide block would cost 1.4 GB), the rest of its own random weights."""
    import diffusers

    cfg = hf.config
    with torch.device("meta"):
        cn = diffusers.QwenImageControlNetModel(
            num_layers=1, num_attention_heads=cfg.num_attention_heads,
            attention_head_dim=cfg.attention_head_dim, extra_condition_channels=extra,
        )  # fmt: skip
    from diffusers.models.transformers.transformer_qwenimage import QwenEmbedRope

    cn.pos_embed = QwenEmbedRope(theta=10000, axes_dim=[16, 56, 56], scale_rope=True)
    cn.transformer_blocks = torch.nn.ModuleList()
    _filled(cn, seed)
    cn.transformer_blocks = torch.nn.ModuleList([hf.transformer_blocks[0]])
    return cn


def our_controlnet_from(cn: Any) -> Any:
    """Ours on diffusers' tensors (InstantX's files are in diffusers' names)."""
    from core.archs.qwen_image.controlnet import QwenImageControlNet, controlnet_config

    state = {k: v for k, v in cn.state_dict().items() if not k.startswith("pos_embed")}
    config, extra = controlnet_config({k: tuple(v.shape) for k, v in state.items()})
    ours = QwenImageControlNet(config, extra, device="meta")
    ours.load_state_dict(state, assign=True, strict=True)
    return ours.eval()


def blockwise_net(dim: int, layers: int, extra: int, seed: int) -> Any:
    """DiffSynth's blockwise ControlNet (ours), random weights of a trained net's scale."""
    from core.archs.qwen_image.blockwise import QwenBlockwiseControlNet

    module = QwenBlockwiseControlNet(dim, layers, extra, device="meta").to_empty(device="cpu")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim == 2:
                p.normal_(0.0, p.shape[1] ** -0.5, generator=gen)
            else:
                p.normal_(1.0 if "rms" in name else 0.0, 0.1, generator=gen)
    return module.eval()


# ComfyUI's computation of DiffSynth's blockwise ControlNets (``comfy_extras/nodes_model_patch.py``:
# ``QwenImageBlockWiseControlNet``, ``DiffSynthCnetPatch``), written out as the golden reference


def _rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def comfy_residual(
    sd: dict[str, torch.Tensor], i: int, img: torch.Tensor, hint: torch.Tensor
) -> torch.Tensor:
    """ComfyUI's ``BlockWiseControlBlock`` ``i`` on the picture's tokens and the projected hint."""
    p = f"controlnet_blocks.{i}."
    y = _rms(img, sd[p + "x_rms.weight"]) + _rms(hint, sd[p + "y_rms.weight"])
    y = F.gelu(F.linear(y, sd[p + "input_proj.weight"], sd[p + "input_proj.bias"]))
    return F.linear(y, sd[p + "output_proj.weight"], sd[p + "output_proj.bias"])


def comfy_hint(sd: dict[str, torch.Tensor], latent: torch.Tensor) -> torch.Tensor:
    """ComfyUI's ``process_input_latent_image`` after the latent format: (B, C, h, w) in 2x2
    patches, channel-major within a token, then ``img_in``."""
    b, c, h, w = latent.shape
    tokens = latent.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c * 4)
    return F.linear(tokens, sd["img_in.weight"], sd["img_in.bias"])
