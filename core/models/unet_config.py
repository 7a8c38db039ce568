"""Configuration of the Stable Diffusion UNet (SD1.x, SD2.x, SDXL, SDXL-refiner, SSD-1B, Vega).

One :class:`UNetConfig` describes every member of the family. Transformer depths are given per block,
as ComfyUI extends the original SGM config, because the distilled SDXL variants (SSD-1B,
Segmind Vega) have different depths in blocks of the same resolution level:

* ``transformer_depth``: one entry per ResBlock on the input side, in ``input_blocks`` order
  (``input_blocks.1``, ``input_blocks.2``, ``input_blocks.4``, ... : conv_in and downsamplers
  are not counted). 0 means that block has no SpatialTransformer.
* ``transformer_depth_middle``: the depth of ``middle_block.1``; ``None`` for a middle block that
  is a single ResBlock (SSD-1B, Vega: diffusers' ``UNetMidBlock2D`` with no layers).
* ``transformer_depth_output``: one entry per output block, in ``output_blocks`` order
  (``output_blocks.0`` first, the lowest resolution). NB: ComfyUI's list is the reverse of this.

:meth:`UNetConfig.from_shapes` derives every field from an original-layout key -> shape map, so
unknown fine-tunes, inpaint (9-channel) and instruct-pix2pix (8-channel) files configure themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

GROUPS = 32
"""GroupNorm groups everywhere in the UNet (every channel count must be a multiple)."""


@dataclass(frozen=True)
class ResStage:
    """One ResBlock of the UNet, with what follows it in the same block."""

    level: int
    """Resolution level: 0 is full resolution, each level halves it."""
    layer: int
    """Position within the level (diffusers' ``resnets.<layer>`` / ``attentions.<layer>``)."""
    in_channels: int
    """Input channels (on the output side: the previous output plus the skip connection)."""
    out_channels: int
    transformer_depth: int
    """SpatialTransformer blocks after the ResBlock; 0 for none."""
    upsample: bool = False
    """An Upsample ends the block (output side only)."""


@dataclass(frozen=True)
class DownStage:
    """A strided-convolution Downsample block (``input_blocks.N.0.op``) leaving ``level``."""

    level: int
    channels: int


@dataclass(frozen=True)
class UNetConfig:
    """Architecture of one SD-family UNet. Build with a preset or :meth:`from_shapes`."""

    in_channels: int
    out_channels: int
    model_channels: int
    channel_mult: tuple[int, ...]
    num_res_blocks: tuple[int, ...]
    """ResBlocks per level on the input side (the output side has one more per level)."""
    transformer_depth: tuple[int, ...]
    transformer_depth_middle: int | None
    transformer_depth_output: tuple[int, ...]
    context_dim: int | None
    """Width of the cross-attention context (text embeddings); None when there is no transformer."""
    num_heads: int | None = None
    """Fixed number of attention heads per transformer (SD1: 8); exclusive with num_head_channels."""
    num_head_channels: int | None = 64
    """Fixed channels per head (SD2, SDXL: 64); exclusive with num_heads."""
    use_linear_in_transformer: bool = False
    """proj_in / proj_out are Linear layers (SD2, SDXL) rather than 1x1 convolutions (SD1)."""
    adm_in_channels: int | None = None
    """Width of the ``y`` vector embedded by ``label_emb`` (SDXL 2816, refiner 2560); None for SD1/SD2."""

    def __post_init__(self) -> None:
        problems = self._shape_problems()
        if not problems:  # the stages can be walked: check what depends on them
            problems = self._width_problems()
        if problems:
            raise ValueError("invalid UNetConfig: " + "; ".join(problems))

    def _shape_problems(self) -> list[str]:
        p: list[str] = []
        positive = {
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            "model_channels": self.model_channels,
            "num_heads": self.num_heads,
            "num_head_channels": self.num_head_channels,
            "context_dim": self.context_dim,
            "adm_in_channels": self.adm_in_channels,
        }
        p += [f"{k} must be >= 1 (got {v})" for k, v in positive.items() if v is not None and v < 1]
        if not self.channel_mult or min(self.channel_mult) < 1:
            p.append(f"channel_mult must be non-empty and positive (got {self.channel_mult})")
        if len(self.num_res_blocks) != len(self.channel_mult) or min(self.num_res_blocks, default=0) < 1:
            p.append("num_res_blocks needs one positive entry per level of channel_mult")
        if len(self.transformer_depth) != sum(self.num_res_blocks):
            p.append(f"transformer_depth needs {sum(self.num_res_blocks)} entries (one per input ResBlock)")
        n_out = sum(n + 1 for n in self.num_res_blocks)
        if len(self.transformer_depth_output) != n_out:
            p.append(f"transformer_depth_output needs {n_out} entries (one per output block)")
        if min((*self.transformer_depth, *self.transformer_depth_output), default=0) < 0:
            p.append("transformer depths must be >= 0")
        if self.transformer_depth_middle is not None and self.transformer_depth_middle < 1:
            p.append("transformer_depth_middle must be >= 1, or None for a single-ResBlock middle")
        if (self.num_heads is None) == (self.num_head_channels is None):
            p.append("set exactly one of num_heads and num_head_channels")
        return p

    def _width_problems(self) -> list[str]:
        p: list[str] = []
        if any(self.model_channels * m % GROUPS for m in self.channel_mult):
            p.append(f"every level's channels must be a multiple of {GROUPS} (GroupNorm groups)")
        if not self.has_transformers:
            return p
        if self.context_dim is None:
            p.append("context_dim is required when there are transformers")
        stages = [s for s in self.input_stages() if isinstance(s, ResStage)] + list(self.output_stages())
        widths = {s.out_channels for s in stages if s.transformer_depth}
        if self.transformer_depth_middle is not None:
            widths.add(self.middle_channels)
        divisor = self.num_heads or self.num_head_channels or 1
        bad = sorted(ch for ch in widths if ch % divisor)
        if bad:
            p.append(f"transformers of {bad} channels do not split by {divisor} (heads)")
        return p

    # -- derived -----------------------------------------------------------------------------

    @property
    def time_embed_dim(self) -> int:
        return self.model_channels * 4

    @property
    def has_transformers(self) -> bool:
        return (
            any(self.transformer_depth)
            or any(self.transformer_depth_output)
            or self.transformer_depth_middle is not None
        )

    @property
    def middle_channels(self) -> int:
        return self.model_channels * self.channel_mult[-1]

    def heads(self, channels: int) -> tuple[int, int]:
        """(heads, channels per head) of a transformer working on ``channels`` channels."""
        if self.num_heads is not None:
            return self.num_heads, channels // self.num_heads
        assert self.num_head_channels is not None
        return channels // self.num_head_channels, self.num_head_channels

    def input_stages(self) -> tuple[ResStage | DownStage, ...]:
        """``input_blocks.1`` onwards, in order (``input_blocks.0`` is the input convolution)."""
        stages: list[ResStage | DownStage] = []
        depths = iter(self.transformer_depth)
        ch = self.model_channels
        for level, (mult, n) in enumerate(zip(self.channel_mult, self.num_res_blocks, strict=True)):
            for layer in range(n):
                out = self.model_channels * mult
                stages.append(ResStage(level, layer, ch, out, next(depths)))
                ch = out
            if level != len(self.channel_mult) - 1:
                stages.append(DownStage(level, ch))
        return tuple(stages)

    def output_stages(self) -> tuple[ResStage, ...]:
        """``output_blocks.0`` onwards, in order."""
        skips = [self.model_channels]
        for s in self.input_stages():
            skips.append(s.out_channels if isinstance(s, ResStage) else s.channels)
        stages: list[ResStage] = []
        depths = iter(self.transformer_depth_output)
        ch = self.middle_channels
        for level in reversed(range(len(self.channel_mult))):
            n = self.num_res_blocks[level]
            for layer in range(n + 1):
                out = self.model_channels * self.channel_mult[level]
                upsample = level > 0 and layer == n
                stages.append(ResStage(level, layer, ch + skips.pop(), out, next(depths), upsample))
                ch = out
        return tuple(stages)

    # -- presets -----------------------------------------------------------------------------

    @classmethod
    def per_level(
        cls,
        *,
        model_channels: int,
        channel_mult: Sequence[int],
        num_res_blocks: int,
        level_depth: Sequence[int],
        transformer_depth_middle: int | None,
        context_dim: int | None,
        in_channels: int = 4,
        out_channels: int = 4,
        num_heads: int | None = None,
        num_head_channels: int | None = 64,
        use_linear_in_transformer: bool = False,
        adm_in_channels: int | None = None,
    ) -> UNetConfig:
        """A config whose blocks of one level all share that level's depth (the original SGM form)."""
        n = num_res_blocks
        return cls(
            in_channels=in_channels,
            out_channels=out_channels,
            model_channels=model_channels,
            channel_mult=tuple(channel_mult),
            num_res_blocks=(n,) * len(channel_mult),
            transformer_depth=tuple(d for d in level_depth for _ in range(n)),
            transformer_depth_middle=transformer_depth_middle,
            transformer_depth_output=tuple(d for d in reversed(level_depth) for _ in range(n + 1)),
            context_dim=context_dim,
            num_heads=num_heads,
            num_head_channels=num_head_channels,
            use_linear_in_transformer=use_linear_in_transformer,
            adm_in_channels=adm_in_channels,
        )

    @classmethod
    def sd1(cls, in_channels: int = 4) -> UNetConfig:
        return cls.per_level(
            model_channels=320,
            channel_mult=(1, 2, 4, 4),
            num_res_blocks=2,
            level_depth=(1, 1, 1, 0),
            transformer_depth_middle=1,
            context_dim=768,
            in_channels=in_channels,
            num_heads=8,
            num_head_channels=None,
        )

    @classmethod
    def sd2(cls, in_channels: int = 4) -> UNetConfig:
        return cls.per_level(
            model_channels=320,
            channel_mult=(1, 2, 4, 4),
            num_res_blocks=2,
            level_depth=(1, 1, 1, 0),
            transformer_depth_middle=1,
            context_dim=1024,
            in_channels=in_channels,
            use_linear_in_transformer=True,
        )

    @classmethod
    def sdxl(cls, in_channels: int = 4) -> UNetConfig:
        return cls.per_level(
            model_channels=320,
            channel_mult=(1, 2, 4),
            num_res_blocks=2,
            level_depth=(0, 2, 10),
            transformer_depth_middle=10,
            context_dim=2048,
            in_channels=in_channels,
            use_linear_in_transformer=True,
            adm_in_channels=2816,
        )

    @classmethod
    def sdxl_refiner(cls) -> UNetConfig:
        return cls.per_level(
            model_channels=384,
            channel_mult=(1, 2, 4, 4),
            num_res_blocks=2,
            level_depth=(0, 4, 4, 0),
            transformer_depth_middle=4,
            context_dim=1280,
            use_linear_in_transformer=True,
            adm_in_channels=2560,
        )

    @classmethod
    def _sdxl_distilled(cls, depth: tuple[int, ...], depth_output: tuple[int, ...]) -> UNetConfig:
        return cls(
            in_channels=4,
            out_channels=4,
            model_channels=320,
            channel_mult=(1, 2, 4),
            num_res_blocks=(2, 2, 2),
            transformer_depth=depth,
            transformer_depth_middle=None,
            transformer_depth_output=depth_output,
            context_dim=2048,
            use_linear_in_transformer=True,
            adm_in_channels=2816,
        )

    @classmethod
    def ssd_1b(cls) -> UNetConfig:
        """Segmind SSD-1B as ComfyUI describes it; a real file is best read with :meth:`from_shapes`."""
        return cls._sdxl_distilled((0, 0, 2, 2, 4, 4), (4, 4, 10, 2, 1, 1, 0, 0, 0))

    @classmethod
    def segmind_vega(cls) -> UNetConfig:
        """Segmind Vega as ComfyUI describes it; a real file is best read with :meth:`from_shapes`."""
        return cls._sdxl_distilled((0, 0, 1, 1, 2, 2), (2, 2, 2, 1, 1, 1, 0, 0, 0))

    # -- detection ---------------------------------------------------------------------------

    @classmethod
    def from_shapes(
        cls,
        shapes: Mapping[str, tuple[int, ...]],
        *,
        num_heads: int | None = None,
        num_head_channels: int | None = None,
    ) -> UNetConfig:
        """The config of the UNet whose original-layout ``key -> shape`` map is ``shapes``.

        Keys are those of a checkpoint after stripping ``model.diffusion_model.``. The head count
        cannot be read from shapes: unless given, it is 8 heads for a 768-wide context (SD1) and
        64 channels per head otherwise (SD2, SDXL), as the original configs have it.

        Raises :class:`~core.errors.ModelMismatchError` when the keys are not such a UNet's.
        """
        from core.models.unet_shapes import ShapeReader  # it builds UNetConfigs: import when used

        return ShapeReader(shapes).config(num_heads, num_head_channels)
