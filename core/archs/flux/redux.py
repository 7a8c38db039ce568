"""FLUX Redux (``style_models/flux1-redux-dev.safetensors``): two linear layers with SiLU between,
``redux_up`` (SigLIP's 1152 -> 3 x 4096) and ``redux_down`` (-> 4096, the T5 context width), turning
each of SigLIP's 729 hidden states into a prompt token (ComfyUI's ``ReduxImageEncoder``, read by
``StyleModel.get_cond`` from ``CLIPVisionEncode``'s ``last_hidden_state``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.archs.image_encoders import StyleModelArchitecture
from core.ops.layers import OpSet, default_ops


@dataclass(frozen=True)
class ReduxConfig:
    encoder_width: int = 1152
    context_width: int = 4096

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, Sequence[int]]) -> ReduxConfig:
        return cls(shapes["redux_up.weight"][1], shapes["redux_down.weight"][0])


class Redux(nn.Module):
    """``[B, tokens, encoder width]`` -> ``[B, tokens, context width]``."""

    def __init__(
        self,
        config: ReduxConfig,
        *,
        ops: OpSet = default_ops,
        device: Any = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        hidden = 3 * config.context_width
        self.redux_up = ops.Linear(config.encoder_width, hidden, device=device, dtype=dtype)
        self.redux_down = ops.Linear(hidden, config.context_width, device=device, dtype=dtype)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.redux_down(F.silu(self.redux_up(hidden)))
        return out


REDUX = StyleModelArchitecture(
    id="flux",
    title="FLUX.1 Redux",
    encoder="siglip-so400m",
    configure=lambda shapes: ReduxConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: Redux(cfg, device=device, dtype=dtype),
    module_type=Redux,
)
