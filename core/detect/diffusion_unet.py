"""The LDM / SGM UNet families (SD1, SD2, SDXL, SDXL refiner, SSD-1B, Segmind Vega) from shapes.

One reading of the block structure (:class:`UNetShape`) serves both key layouts, the original
(``input_blocks`` / ``middle_block`` / ``output_blocks``) and diffusers' UNet2DConditionModel
(``down_blocks`` / ``mid_block`` / ``up_blocks``), and the ControlNets built on the same input side.
The family is then a lookup in :data:`UNET_TABLE`, not a branch per family.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from core.detect.diffusion_probe import count_numbered, finish, is_controlnet, ndim
from core.detect.keyview import KeyView
from core.detect.registry import Match

_TBLOCK = ("norm1.weight", "attn1.to_q.weight", "attn1.to_k.weight")
_RES_LDM = ("in_layers.0.weight", "in_layers.2.weight")

IN_CHANNEL_VARIANTS = {9: "inpaint", 8: "instruct-pix2pix"}
UNET_PROBES_ORIGINAL = (
    "input_blocks.4.1.transformer_blocks.0.attn1.to_q.weight",
    "middle_block.1.transformer_blocks.0.attn1.to_q.weight",
    "input_blocks.1.0.emb_layers.1.weight",
    "input_blocks.0.0.weight",
)
UNET_PROBES_DIFFUSERS = (
    "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q.weight",
    "mid_block.attentions.0.transformer_blocks.0.attn1.to_q.weight",
    "down_blocks.0.resnets.0.time_emb_proj.weight",
    "conv_in.weight",
)


@dataclass(frozen=True)
class UNetShape:
    """What the shapes of a UNet (or a ControlNet's input side) say.

    ``transformer_depth``: one value per input res block, in order. ``transformer_depth_output``: one
    value per output res block, shallowest level first (the SGM config convention: output block 0,
    the deepest, takes the last value). ``transformer_depth_middle``: -1 when the middle is a single
    res block, -2 when there is none.
    """

    in_channels: int
    model_channels: int
    out_channels: int | None
    context_dim: int | None
    adm_in_channels: int | None
    channel_mult: tuple[int, ...]
    num_res_blocks: tuple[int, ...]
    transformer_depth: tuple[int, ...]
    transformer_depth_output: tuple[int, ...]
    transformer_depth_middle: int
    use_linear_in_transformer: bool


def _transformer(view: KeyView, p: str) -> tuple[int, int | None, bool]:
    """(depth, context dim, linear proj) of the spatial transformer at ``p`` (depth 0: none)."""
    depth = count_numbered(view, f"{p}transformer_blocks.", _TBLOCK)
    ctx = view.dim(f"{p}transformer_blocks.0.attn2.to_k.weight", 1) if depth else None
    return depth, ctx, ndim(view, f"{p}proj_in.weight") == 2


def read_ldm_input_side(view: KeyView) -> UNetShape | None:
    """The input blocks and middle block in the original layout (no output side)."""
    first = view.shape("input_blocks.0.0.weight")
    if first is None or len(first) != 4:
        return None
    mc = first[0]
    depths: list[int] = []
    nres: list[int] = []
    mult: list[int] = []
    ctx: int | None = None
    linear = False
    res = last_mult = 0
    i = 1
    while i < 1000:
        p = f"input_blocks.{i}."
        if f"{p}0.op.weight" in view or f"{p}0.op.bias" in view:
            nres.append(res)
            mult.append(last_mult)
            res = 0
        elif any(f"{p}0.{s}" in view for s in _RES_LDM):
            res += 1
            last_mult = (view.dim(f"{p}0.out_layers.3.weight", 0) or mc) // mc
            depth, c, lin = _transformer(view, f"{p}1.")
            depths.append(depth)
            if depth and ctx is None:
                ctx, linear = c, lin
        else:
            break
        i += 1
    nres.append(res)
    mult.append(last_mult)
    mid_depth, mid_ctx, mid_lin = _transformer(view, "middle_block.1.")
    if mid_depth:
        ctx, linear = (ctx, linear) if ctx is not None else (mid_ctx, mid_lin)
    elif "middle_block.0.in_layers.0.weight" in view:
        mid_depth = -1
    else:
        mid_depth = -2
    return UNetShape(
        in_channels=first[1],
        model_channels=mc,
        out_channels=None,
        context_dim=ctx,
        adm_in_channels=view.dim("label_emb.0.0.weight", 1),
        channel_mult=tuple(mult),
        num_res_blocks=tuple(nres),
        transformer_depth=tuple(depths),
        transformer_depth_output=(),
        transformer_depth_middle=mid_depth,
        use_linear_in_transformer=linear,
    )


def read_ldm_unet(view: KeyView) -> UNetShape | None:
    shape = read_ldm_input_side(view)
    if shape is None:
        return None
    out = [
        _transformer(view, f"output_blocks.{j}.1.")[0]
        for j in range(count_numbered(view, "output_blocks.", tuple(f"0.{s}" for s in _RES_LDM)))
    ]
    return _with_output(shape, out[::-1], view.dim("out.2.weight", 0))


def _with_output(shape: UNetShape, depth_output: list[int], out_channels: int | None) -> UNetShape:
    fields = asdict(shape)
    fields.update(transformer_depth_output=tuple(depth_output), out_channels=out_channels)
    return UNetShape(**fields)


def read_diffusers_input_side(view: KeyView) -> UNetShape | None:
    """conv_in, down blocks and mid block of a UNet2DConditionModel or a diffusers ControlNetModel."""
    first = view.shape("conv_in.weight")
    if first is None or len(first) != 4 or "down_blocks.0.resnets.0.conv1.weight" not in view:
        return None
    mc = first[0]
    depths: list[int] = []
    nres: list[int] = []
    mult: list[int] = []
    ctx: int | None = None
    linear = False
    levels = count_numbered(view, "down_blocks.", ("resnets.0.conv1.weight",))
    for lv in range(levels):
        n = count_numbered(view, f"down_blocks.{lv}.resnets.", ("conv1.weight",))
        nres.append(n)
        mult.append((view.dim(f"down_blocks.{lv}.resnets.0.conv2.weight", 0) or mc) // mc)
        for j in range(n):
            depth, c, lin = _transformer(view, f"down_blocks.{lv}.attentions.{j}.")
            depths.append(depth)
            if depth and ctx is None:
                ctx, linear = c, lin
    mid_depth, mid_ctx, mid_lin = _transformer(view, "mid_block.attentions.0.")
    if mid_depth:
        ctx, linear = (ctx, linear) if ctx is not None else (mid_ctx, mid_lin)
    elif "mid_block.resnets.0.conv1.weight" in view:
        mid_depth = -1
    else:
        mid_depth = -2
    adm = view.dim("add_embedding.linear_1.weight", 1) or view.dim("class_embedding.linear_1.weight", 1)
    return UNetShape(
        in_channels=first[1],
        model_channels=mc,
        out_channels=None,
        context_dim=ctx,
        adm_in_channels=adm,
        channel_mult=tuple(mult),
        num_res_blocks=tuple(nres),
        transformer_depth=tuple(depths),
        transformer_depth_output=(),
        transformer_depth_middle=mid_depth,
        use_linear_in_transformer=linear,
    )


def read_diffusers_unet(view: KeyView) -> UNetShape | None:
    shape = read_diffusers_input_side(view)
    if shape is None or "up_blocks.0.resnets.0.conv1.weight" not in view:
        return None
    out: list[int] = []
    for u in range(len(shape.channel_mult)):
        for j in range(count_numbered(view, f"up_blocks.{u}.resnets.", ("conv1.weight",))):
            out.append(_transformer(view, f"up_blocks.{u}.attentions.{j}.")[0])
    return _with_output(shape, out[::-1], view.dim("conv_out.weight", 0))


@dataclass(frozen=True)
class UNetKind:
    family: str
    context_dim: int
    adm_in_channels: int | None
    transformer_depth: tuple[int, ...] | None = None  # None: any depth
    model_channels: int | None = None


#: (context width, label-embedding width, transformer depths) -> family; the most specific row first.
UNET_TABLE: tuple[UNetKind, ...] = (
    UNetKind("sdxl", 2048, 2816, (0, 0, 2, 2, 10, 10)),
    UNetKind("ssd-1b", 2048, 2816, (0, 0, 2, 2, 4, 4)),
    UNetKind("segmind-vega", 2048, 2816, (0, 0, 1, 1, 2, 2)),
    UNetKind("sdxl-refiner", 1280, 2560),
    UNetKind("sd1", 768, None),
    UNetKind("sd2", 1024, None),
    UNetKind("sd2", 1024, 1536),  # SD2.1 unCLIP-L
    UNetKind("sd2", 1024, 2048),  # SD2.1 unCLIP-H
)


def unet_family(shape: UNetShape) -> tuple[str, float, list[str]] | None:
    """(family, score, warnings) for a UNet shape, or None when no family has these widths."""
    for kind in UNET_TABLE:
        if (kind.context_dim, kind.adm_in_channels) != (shape.context_dim, shape.adm_in_channels):
            continue
        if kind.transformer_depth is None or kind.transformer_depth == shape.transformer_depth:
            return kind.family, 1.0, []
    if (shape.context_dim, shape.adm_in_channels) == (2048, 2816):
        depth = list(shape.transformer_depth)
        return "sdxl", 0.6, [f"transformer depths {depth} differ from SDXL's: a pruned or distilled SDXL"]
    return None


def unet_variant(shape: UNetShape) -> tuple[str | None, list[str]]:
    if shape.adm_in_channels in (1536, 2048) and shape.context_dim == 1024:
        return "unclip", []
    if shape.in_channels in IN_CHANNEL_VARIANTS:
        return IN_CHANNEL_VARIANTS[shape.in_channels], []
    if shape.in_channels != 4:
        return None, [f"unusual input channel count {shape.in_channels}"]
    return None, []


def classify_unet(view: KeyView) -> list[Match]:
    """SD1 / SD2 / SDXL / refiner / SSD-1B / Vega UNets in either layout; empty when not a UNet."""
    if is_controlnet(view):
        return []
    shape, layout, probes = read_ldm_unet(view), "original", UNET_PROBES_ORIGINAL
    if shape is None:
        shape, layout, probes = read_diffusers_unet(view), "diffusers", UNET_PROBES_DIFFUSERS
    if shape is None or "input_blocks.1.1.time_stack.0.attn1.to_q.weight" in view:
        return []  # not a UNet, or a video UNet (SVD) whose widths would pass for SD2
    found = unet_family(shape)
    if found is None:
        return []
    family, score, warnings = found
    variant, more = unet_variant(shape)
    fields = asdict(shape)
    fields["prediction"] = "eps"
    if family == "sd2":
        fields["prediction"] = "unknown"
        fields["ambiguous_variants"] = ["v-prediction"]
        warnings.append(
            "SD2 epsilon (512-base) and v-prediction (768-v) models have the same shapes: "
            "the file name, metadata or global_step decides"
        )
    return [
        finish(
            view,
            family,
            layout=layout,
            probes=probes,
            fields=fields,
            variant=variant,
            warnings=warnings + more,
            score=score,
        )
    ]
