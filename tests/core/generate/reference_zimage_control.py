"""diffusers' ``ZImageControlNetModel`` beside its ``ZImageTransformer2DModel`` (test-only
reference), wired as ComfyUI's ``ZImageFunControlnet`` model patch computes:

* the control blocks attend to the picture's own tokens alone and their hints reach only those
  (diffusers' blocks attend to the caption too and add to every token): each control block is
  wrapped to mask the other keys and zero the hints' other rows;
* the 2.x refiner hints are added to the base network's refined picture tokens too (diffusers
  adds them inside the ControlNet's own refiner pass only): forward hooks on the base's refiners.

With a picture of a multiple of 32 tokens (no pads) the two then compute the same thing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from tests.core.generate.reference_nextdit import _filled


class PictureOnly(nn.Module):
    """A diffusers control block that sees and adds to the first ``tokens`` tokens alone."""

    def __init__(self, block: nn.Module, tokens: int, seen: list[torch.Tensor]) -> None:
        super().__init__()
        self.block, self.tokens, self.seen = block, tokens, seen

    def forward(self, c: torch.Tensor, x: torch.Tensor, mask: torch.Tensor, *rest: Any) -> torch.Tensor:
        picture = torch.zeros_like(mask)
        picture[:, : self.tokens] = True
        out: torch.Tensor = self.block(c, x, picture, *rest)
        out[:-1, :, self.tokens :] = 0
        self.seen.append(out[-2])
        return out


def control_reference(
    hf: Any, *, layers: int, in_dim: int, refiner: str | None, refiners: int, seed: int = 5
) -> Any:
    """A random-weight ``ZImageControlNetModel`` for ``hf`` (control blocks after joint blocks
    0, 1, ...; refiner mode None (1.0), ``"control_noise_refiner"`` (2.1) or ``"control_layers"``
    (2.0's stand-in))."""
    import diffusers

    cfg = hf.config
    with torch.device("meta"):
        cn = diffusers.ZImageControlNetModel(
            control_layers_places=list(range(layers)), control_refiner_layers_places=list(range(refiners)),
            control_in_dim=in_dim, add_control_noise_refiner=refiner, dim=cfg.dim, n_refiner_layers=refiners,
            n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads,
        )  # fmt: skip
    _filled(cn, seed)
    return diffusers.ZImageControlNetModel.from_transformer(cn, hf)


@contextmanager
def comfy_wired(hf: Any, cn: Any, tokens: int, scale: float) -> Iterator[None]:
    """Inside: ``cn`` and ``hf`` compute as ComfyUI's model patch does (see the module) for a
    picture of ``tokens`` tokens, each ControlNet call followed by the transformer's call."""
    refined: list[torch.Tensor] = []
    seen: list[torch.Tensor] = []
    adding = {"on": False}
    blocks = cn.control_layers
    for i, block in enumerate(list(blocks)):
        blocks[i] = PictureOnly(block, tokens, seen)
    refiner_blocks = (
        cn.control_noise_refiner if cn.add_control_noise_refiner == "control_noise_refiner" else None
    )
    if refiner_blocks is not None:
        for i, block in enumerate(list(refiner_blocks)):
            refiner_blocks[i] = PictureOnly(block, tokens, refined)

    def starting(module: nn.Module, args: Any) -> None:
        refined.clear()
        seen.clear()
        adding["on"] = False

    def done(module: nn.Module, args: Any, out: Any) -> None:
        if cn.add_control_noise_refiner == "control_layers":  # the 2.0 stand-in's refiner hints
            refined.extend(seen[: len(hf.noise_refiner)])
        adding["on"] = True

    def add(index: int) -> Any:
        def hook(module: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
            if not adding["on"] or index >= len(refined):
                return out
            return out + refined[index] * scale

        return hook

    handles = [layer.register_forward_hook(add(i)) for i, layer in enumerate(hf.noise_refiner)]
    handles += [cn.register_forward_pre_hook(starting), cn.register_forward_hook(done)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for i, block in enumerate(list(blocks)):
            blocks[i] = block.block
        if refiner_blocks is not None:
            for i, block in enumerate(list(refiner_blocks)):
                refiner_blocks[i] = block.block


def controlled_velocity(
    hf: Any,
    cn: Any,
    x: torch.Tensor,
    sigma: torch.Tensor,
    ctx: list[torch.Tensor],
    hint: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """ComfyUI's velocity from diffusers' modules wired as ComfyUI computes (see the module)."""
    xs = [xi[:, None] for xi in x]
    hints = [hint[0][:, None]] * len(xs)
    with comfy_wired(hf, cn, x.shape[-2] * x.shape[-1] // 4, scale), torch.no_grad():
        samples = cn(xs, 1.0 - sigma, ctx, hints, conditioning_scale=scale)
        out = hf(xs, 1.0 - sigma, ctx, controlnet_block_samples=samples, return_dict=False)[0]
    return -torch.stack([o[:, 0] for o in out])
