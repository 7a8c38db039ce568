"""Reading a :class:`~core.models.unet_config.UNetConfig` from an original-layout key -> shape map."""

from __future__ import annotations

import re
from collections.abc import Mapping

from core.errors import ModelMismatchError
from core.models.unet_config import UNetConfig

_DEPTH_KEY = re.compile(
    r"^(input_blocks\.\d+\.1|middle_block\.1|output_blocks\.\d+\.1)\.transformer_blocks\.(\d+)\."
)
_BLOCK_KEY = re.compile(r"^(input|output)_blocks\.(\d+)\.")


class ShapeReader:
    """Walks the block keys once; :meth:`config` derives every field."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]]) -> None:
        self.shapes = shapes
        self.depths: dict[str, int] = {}
        self.blocks: dict[str, int] = {"input": -1, "output": -1}
        for key in shapes:
            m = _DEPTH_KEY.match(key)
            if m:
                self.depths[m[1]] = max(self.depths.get(m[1], 0), int(m[2]) + 1)
            b = _BLOCK_KEY.match(key)
            if b:
                self.blocks[b[1]] = max(self.blocks[b[1]], int(b[2]))

    def fail(self, what: str) -> ModelMismatchError:
        return ModelMismatchError(
            f"The weights are not a Stable Diffusion UNet in the original layout: {what}",
            why="the UNet architecture is read from key names and shapes",
            fix="pass the diffusion model's keys with the 'model.diffusion_model.' prefix stripped, "
            "or convert a diffusers UNet with unet_diffusers_to_original first",
        )

    def shape(self, key: str) -> tuple[int, ...]:
        s = self.shapes.get(key)
        if s is None:
            raise self.fail(f"{key!r} is missing")
        return tuple(s)

    def config(self, num_heads: int | None, num_head_channels: int | None) -> UNetConfig:
        out_ch = self.shape("out.2.weight")[0]
        model_channels, in_ch = self.shape("input_blocks.0.0.weight")[:2]
        ted = self.shape("time_embed.0.weight")[0]
        if ted != 4 * model_channels:
            raise self.fail(f"time embedding width {ted} is not 4 x {model_channels} model channels")
        adm = self.shapes.get("label_emb.0.0.weight")
        mult, nrb, depth = self.input_side(model_channels)
        context_dim, use_linear = self.transformer_shape()
        if num_heads is None and num_head_channels is None:
            num_heads, num_head_channels = (8, None) if context_dim == 768 else (None, 64)
        try:
            return UNetConfig(
                in_channels=in_ch,
                out_channels=out_ch,
                model_channels=model_channels,
                channel_mult=mult,
                num_res_blocks=nrb,
                transformer_depth=depth,
                transformer_depth_middle=self.middle_depth(),
                transformer_depth_output=self.output_side(sum(n + 1 for n in nrb)),
                context_dim=context_dim,
                num_heads=num_heads,
                num_head_channels=num_head_channels,
                use_linear_in_transformer=use_linear,
                adm_in_channels=None if adm is None else adm[1],
            )
        except ValueError as e:
            raise self.fail(str(e)) from None

    def input_side(self, model_channels: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        mult: list[int] = []
        nrb: list[int] = []
        depth: list[int] = []
        count, ch = 0, model_channels
        for n in range(1, self.blocks["input"] + 1):
            if f"input_blocks.{n}.0.op.weight" in self.shapes:
                if count == 0:
                    raise self.fail(f"input_blocks.{n} downsamples a level with no ResBlock")
                mult.append(ch // model_channels)
                nrb.append(count)
                count = 0
                continue
            ch = self.shape(f"input_blocks.{n}.0.in_layers.2.weight")[0]
            if ch % model_channels:
                raise self.fail(f"input_blocks.{n} has {ch} channels, not a multiple of {model_channels}")
            count += 1
            depth.append(self.depths.get(f"input_blocks.{n}.1", 0))
        if count == 0:
            raise self.fail("the last input level has no ResBlock")
        mult.append(ch // model_channels)
        nrb.append(count)
        return tuple(mult), tuple(nrb), tuple(depth)

    def middle_depth(self) -> int | None:
        if "middle_block.1.proj_in.weight" in self.shapes:
            self.shape("middle_block.2.in_layers.2.weight")
            return self.depths.get("middle_block.1", 0)
        self.shape("middle_block.0.in_layers.2.weight")
        return None

    def output_side(self, n_out: int) -> tuple[int, ...]:
        if self.blocks["output"] != n_out - 1:
            raise self.fail(f"{self.blocks['output'] + 1} output blocks where the input side implies {n_out}")
        return tuple(self.depths.get(f"output_blocks.{m}.1", 0) for m in range(n_out))

    def transformer_shape(self) -> tuple[int | None, bool]:
        """(context width, linear projections) from the first transformer found."""
        for prefix in self.depths:
            context = self.shape(f"{prefix}.transformer_blocks.0.attn2.to_k.weight")[1]
            return context, len(self.shape(f"{prefix}.proj_in.weight")) == 2
        return None, False
