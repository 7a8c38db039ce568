"""Qwen-Image's configuration: the facts a file's shapes give, and the few it does not store.

Facts from ComfyUI's ``comfy/model_detection.py`` (``image_model: qwen_image``) and the released
model: 60 dual-stream blocks 3072 wide (24 heads of 128), a GELU(tanh) MLP 4x wide, Qwen2.5-VL-7B's
3584-wide hidden states as the text, 16 latent channels in 2x2 patches (64 per token), rotary
positions on three axes of (16, 56, 56) channels with theta 10000 (not stored in a file).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.errors import ModelMismatchError

#: keys every Qwen-Image file has (ComfyUI and diffusers name them alike)
REQUIRED = (
    "img_in.weight",
    "txt_in.weight",
    "txt_norm.weight",
    "time_text_embed.timestep_embedder.linear_1.weight",
    "transformer_blocks.0.attn.norm_q.weight",
    "transformer_blocks.0.img_mlp.net.0.proj.weight",
    "proj_out.weight",
)
AXES_DIMS = (16, 56, 56)
ROPE_THETA = 10000.0


@dataclass(frozen=True)
class QwenImageConfig:
    dim: int = 3072
    n_layers: int = 60
    n_heads: int = 24
    mlp_hidden: int = 12288
    context_dim: int = 3584
    #: the latent's channels (a token holds a 2x2 patch of them)
    latent_channels: int = 16
    out_channels: int = 16
    patch_size: int = 2
    #: the timestep MLP's input (sinusoidal features)
    time_features: int = 256
    #: reference pictures' tokens modulated as at timestep 0 (Qwen-Image-Edit 2511: ComfyUI's
    #: ``index_timestep_zero`` reference method, diffusers' ``zero_cond_t``)
    zero_timestep_references: bool = False

    def __post_init__(self) -> None:
        if self.n_heads <= 0 or self.dim % self.n_heads:
            raise ModelMismatchError(
                f"a Qwen-Image transformer {self.dim} wide cannot have {self.n_heads} heads",
                why="the width must split into whole heads",
                fix="check that the file is a Qwen-Image diffusion model",
            )
        if self.head_dim != sum(AXES_DIMS):
            raise ModelMismatchError(
                f"Qwen-Image's heads are {sum(AXES_DIMS)} channels wide, this file's {self.head_dim}",
                why="its rotary position axes (16, 56, 56) are fixed, not stored in the file",
                fix="check that the file is a released Qwen-Image model",
            )

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def in_channels(self) -> int:
        """A token's input width (what callers that count a network's inputs read: packed)."""
        return self.latent_channels * self.patch_size**2

    @property
    def hidden_size(self) -> int:
        """The channel width (what memory profiles scale by)."""
        return self.dim

    @classmethod
    def from_shapes(
        cls, shapes: Mapping[str, Sequence[int]], zero_timestep_references: bool = False
    ) -> QwenImageConfig:
        """Read from the file's keys (no ``model.diffusion_model.`` prefix); whether references
        take the zero timestep is the family's (Edit 2511's), not the shapes'."""
        missing = [k for k in REQUIRED if k not in shapes]
        if missing:
            raise ModelMismatchError(
                "These tensors are not a Qwen-Image diffusion model",
                why=f"missing {missing}",
                fix="check that the file is a Qwen-Image diffusion model",
            )
        dim, patch_in = (int(d) for d in shapes["img_in.weight"][:2])
        head_dim = int(shapes["transformer_blocks.0.attn.norm_q.weight"][0])
        return cls(
            dim=dim,
            n_layers=_count(shapes, "transformer_blocks."),
            n_heads=dim // head_dim if head_dim else 0,
            mlp_hidden=int(shapes["transformer_blocks.0.img_mlp.net.0.proj.weight"][0]),
            context_dim=int(shapes["txt_in.weight"][1]),
            latent_channels=patch_in // 4,
            out_channels=int(shapes["proj_out.weight"][0]) // 4,
            time_features=int(shapes["time_text_embed.timestep_embedder.linear_1.weight"][1]),
            zero_timestep_references=zero_timestep_references,
        )


def _count(shapes: Mapping[str, Sequence[int]], prefix: str) -> int:
    found = {int(k[len(prefix) :].split(".", 1)[0]) for k in shapes if k.startswith(prefix)}
    return max(found) + 1 if found else 0
