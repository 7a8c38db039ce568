"""Previews through TAESD, the tiny autoencoder many artists already have (ComfyUI keeps its
decoders in ``models/vae_approx``: ``taesd_decoder`` for SD1/SD2, ``taesdxl_decoder`` for SDXL, the
family record's ``preview_decoder``).

Facts of the network (the public TAESD release, as ComfyUI and diffusers' AutoencoderTiny load it):
a plain convolutional decoder in an ``nn.Sequential`` whose index 0 is a soft clamp
(``tanh(x / 3) * 3``), then a 3x3 conv from the latent's channels to 64, ReLU, three blocks of
[conv-ReLU-conv-ReLU-conv + the input, ReLU] per level with three 2x nearest upsamplings (each
followed by a bias-free conv), one last block and a conv to RGB in [0, 1]. It takes the diffusion
model's latent directly (the sampler's denoised estimate): a few milliseconds per preview, and a
picture much closer to the final one than a linear map. For the 16-channel families (SD3, Flux)
Loadout keeps the linear map fitted from the VAE (``core.generate.preview``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from core.detect.catalog import REGISTRY
from core.errors import LoadoutError
from core.files.leases import open_input


class _Clamp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x / 3) * 3


class _Block(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(n, n, 3, padding=1), nn.ReLU(), nn.Conv2d(n, n, 3, padding=1), nn.ReLU(),
            nn.Conv2d(n, n, 3, padding=1),
        )  # fmt: skip
        self.skip = nn.Identity()
        self.fuse = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fuse(self.conv(x) + self.skip(x))
        return out


def tiny_decoder(latent_channels: int = 4, width: int = 64) -> nn.Sequential:
    layers: list[nn.Module] = [_Clamp(), nn.Conv2d(latent_channels, width, 3, padding=1), nn.ReLU()]
    for _ in range(3):
        layers += [_Block(width), _Block(width), _Block(width), nn.Upsample(scale_factor=2)]
        layers.append(nn.Conv2d(width, width, 3, padding=1, bias=False))
    layers += [_Block(width), nn.Conv2d(width, 3, 3, padding=1)]
    return nn.Sequential(*layers)


class TaesdPreview:
    """``rgb(latent)``: the first picture of a model-space latent as (8h, 8w, 3) uint8.

    The decoder runs where the latent is (a copy of it is made on that device the first time, a
    few MiB, as ComfyUI keeps TAESD on the GPU): decoding a 1024x1024 preview on the CPU took
    seconds per step. Only the finished uint8 picture comes back to the host."""

    def __init__(self, decoder: nn.Module) -> None:
        self.decoder = decoder.eval()
        self._placed: tuple[torch.device, nn.Module] | None = None

    def decoder_on(self, device: torch.device) -> nn.Module:
        if device.type == "cpu":
            return self.decoder
        if self._placed is None or self._placed[0] != device:
            self._placed = (device, copy.deepcopy(self.decoder).to(device))
        return self._placed[1]

    def pixels(self, latent: torch.Tensor) -> torch.Tensor:
        """The first picture as (3, 8h, 8w) uint8 on the latent's device."""
        decoder = self.decoder_on(latent.device)
        with torch.inference_mode():
            out: torch.Tensor = decoder(latent[:1].detach().to(torch.float32))[0]
            return (out.clamp(0, 1) * 255).round().to(torch.uint8)

    def rgb(self, latent: torch.Tensor) -> np.ndarray:
        out: np.ndarray = self.pixels(latent).permute(1, 2, 0).cpu().numpy()
        return out


def load_taesd(path: Path) -> TaesdPreview:
    """A TAESD decoder file (.safetensors, or .pth read with ``weights_only``)."""
    try:
        open_input(path).close()  # a FIFO or device is refused, never waited on
        if path.suffix in (".safetensors", ".sft"):
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
        first = state["1.weight"]
        decoder = tiny_decoder(int(first.shape[1]), int(first.shape[0]))
        decoder.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    except (KeyError, RuntimeError, OSError, ValueError) as exc:
        raise LoadoutError(
            f"{path.name} is not a TAESD decoder Loadout can use",
            why=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
            fix="Use taesd_decoder / taesdxl_decoder from the TAESD release, or remove the file",
            code="invalid_file",
        ) from None
    return TaesdPreview(decoder)


def find_taesd(family: str, folders: Iterable[Path]) -> Path | None:
    """The family's TAESD decoder in ``folders`` (e.g. ComfyUI's ``models/vae_approx``), if any."""
    fam = REGISTRY.get(family)
    stem = fam.diffusion.preview_decoder if fam is not None and fam.diffusion is not None else None
    if stem is None:
        return None
    for folder in folders:
        for suffix in (".safetensors", ".pth"):
            candidate = Path(folder) / f"{stem}{suffix}"
            if candidate.is_file():
                return candidate
    return None
