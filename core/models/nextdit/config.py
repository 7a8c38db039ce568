"""Next-DiT's configuration: the facts a file's shapes give, and the few it does not store.

Facts from ComfyUI's ``comfy/model_detection.py`` (``image_model: lumina2``) and the two released
forms. What a file does not store is fixed by its *form*, told apart by its modulation layers:

================ ================================ ===================================
                 Lumina 2 (NetaYume)              Z-Image (Turbo, Base)
================ ================================ ===================================
width, layers    2304, 26                         3840, 30
heads (kv)       24 (8): 96 channels each         30 (30): 128 channels each
RoPE axes        (32, 32, 32), theta 10000        (32, 48, 48), theta 256
modulation       SiLU -> Linear(1024, 4 x width)  Linear(256, 4 x width), no SiLU
timestep         t in [0, 1] (``time_scale`` 1)   t x 1000
token padding    none                             caption and image to a multiple of 32
                                                  with learned pad tokens
text             Gemma-2-2B (2304 wide)           Qwen3-4B (2560 wide)
================ ================================ ===================================

Both have two noise-refiner blocks (image tokens, modulated by the timestep) and two context
refiners (caption tokens, unmodulated) before the joint blocks, RMS q/k norms, a SwiGLU MLP and
sandwich norms (RMS before and after attention and MLP).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from core.errors import ModelMismatchError

Form = Literal["lumina2", "z-image"]

#: keys every Next-DiT file in the original layout has
REQUIRED = (
    "x_embedder.weight",
    "cap_embedder.1.weight",
    "t_embedder.mlp.0.weight",
    "layers.0.attention.qkv.weight",
    "layers.0.attention.q_norm.weight",
    "layers.0.feed_forward.w1.weight",
    "final_layer.linear.weight",
)


@dataclass(frozen=True)
class NextDiTConfig:
    dim: int = 3840
    n_layers: int = 30
    n_refiner_layers: int = 2
    n_heads: int = 30
    n_kv_heads: int = 30
    ffn_hidden: int = 10240
    cap_feat_dim: int = 2560
    in_channels: int = 16
    patch_size: int = 2
    norm_eps: float = 1e-5
    #: the form: Z-Image (True) or Lumina 2 (False), read from the modulation layers
    z_image: bool = True
    #: the timestep MLP's hidden width and the modulation vector's width it ends in (1024 and 256 in
    #: Z-Image, 1024 and 1024 in Lumina 2: min(width, 1024) and the form's, as released)
    t_hidden: int = 1024
    adaln_dim: int = 256
    #: Z-Image: caption and image tokens are padded to a multiple of this with learned tokens
    pad_tokens_multiple: int | None = 32

    def __post_init__(self) -> None:
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ModelMismatchError(
                f"a Next-DiT {self.dim} wide cannot have {self.n_heads} heads and {self.n_kv_heads} kv heads",
                why="the width must split into whole heads, and the heads into whole kv groups",
                fix="check that the file is a Lumina 2 or Z-Image diffusion model",
            )
        if self.head_dim != sum(self.axes_dims):
            raise ModelMismatchError(
                f"a {self.form} Next-DiT has {sum(self.axes_dims)}-channel heads, this one {self.head_dim}",
                why="its rotary position axes are fixed by the form, not stored in the file",
                fix="check that the file is a released Lumina 2 or Z-Image model",
            )

    @property
    def out_channels(self) -> int:
        return self.in_channels

    @property
    def context_dim(self) -> int:
        """The text features' width (what callers that count a network's inputs read)."""
        return self.cap_feat_dim

    @property
    def hidden_size(self) -> int:
        """The channel width (what memory profiles scale by)."""
        return self.dim

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def form(self) -> Form:
        """The form's name (the family it is released as)."""
        return "z-image" if self.z_image else "lumina2"

    @property
    def axes_dims(self) -> tuple[int, int, int]:
        return (32, 48, 48) if self.z_image else (32, 32, 32)

    @property
    def rope_theta(self) -> float:
        return 256.0 if self.z_image else 10000.0

    @property
    def time_scale(self) -> float:
        return 1000.0 if self.z_image else 1.0

    @classmethod
    def lumina2(cls, **overrides: int) -> NextDiTConfig:
        base = dict(
            dim=2304,
            n_layers=26,
            n_heads=24,
            n_kv_heads=8,
            ffn_hidden=9216,
            cap_feat_dim=2304,
            adaln_dim=1024,
        )
        base.update(overrides)
        return cls(**base, z_image=False, pad_tokens_multiple=None)

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, Sequence[int]]) -> NextDiTConfig:
        """Read from original-layout keys (no ``model.diffusion_model.`` prefix)."""
        missing = [k for k in REQUIRED if k not in shapes]
        if missing:
            raise ModelMismatchError(
                "These tensors are not a Next-DiT (Lumina 2 / Z-Image) in the original layout",
                why=f"missing {missing}",
                fix="check that the file is a Lumina 2 or Z-Image diffusion model",
            )
        dim, patch_in = (int(d) for d in shapes["x_embedder.weight"][:2])
        head_dim = int(shapes["layers.0.attention.q_norm.weight"][0])
        qkv = int(shapes["layers.0.attention.qkv.weight"][0])
        n_heads = dim // head_dim if head_dim else 0
        z_image = "layers.0.adaLN_modulation.0.weight" in shapes
        return cls(
            dim=dim,
            n_layers=_count(shapes, "layers."),
            n_refiner_layers=_count(shapes, "noise_refiner."),
            n_heads=n_heads,
            n_kv_heads=(qkv // head_dim - n_heads) // 2 if head_dim else 0,
            ffn_hidden=int(shapes["layers.0.feed_forward.w1.weight"][0]),
            cap_feat_dim=int(shapes["cap_embedder.1.weight"][1]),
            in_channels=patch_in // 4,
            z_image=z_image,
            t_hidden=int(shapes["t_embedder.mlp.0.weight"][0]),
            adaln_dim=int(shapes["t_embedder.mlp.2.weight"][0]),
            pad_tokens_multiple=32 if "cap_pad_token" in shapes else None,
        )


def _count(shapes: Mapping[str, Sequence[int]], prefix: str) -> int:
    found = {int(k[len(prefix) :].split(".", 1)[0]) for k in shapes if k.startswith(prefix)}
    return max(found) + 1 if found else 0


def round_up(n: int, multiple: int | None) -> int:
    """``n`` rounded up to a multiple (itself where there is none)."""
    return n if not multiple else math.ceil(n / multiple) * multiple
