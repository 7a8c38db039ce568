"""The SD1/SD2 and SDXL UNets' blocks: ComfyUI's ``ModelMergeSD1`` (also its ``ModelMergeSD2``)
and ``ModelMergeSDXL`` arguments, and A1111's LoRA-block-weight layouts. ComfyUI writes SDXL's
block prefixes without a final dot (``input_blocks.1`` also starts ``input_blocks.10``, which SDXL
does not have).

LoRA block weights (hako-mikan's sd-webui-lora-block-weight): SD1 takes 17 values (``BASE``, then
the blocks holding attention: IN01 IN02 IN04 IN05 IN07 IN08, M00, OUT03 ... OUT11) or 26 (every
block: IN00-IN11, M00, OUT00-OUT11); SDXL 12 (BASE, IN04 IN05 IN07 IN08, M00, OUT00-OUT05) or 20
(IN00-IN08, M00, OUT00-OUT08). The presets are the extension's own (SD1) and the Inspire pack's
SDXL ones."""

from core.archs.blocks import BASE, BlockTable, LbwBlocks, numbered


def _lbw_prefixes(inputs: int, outputs: int) -> dict[str, str]:
    names = {f"IN{i:02d}": f"input_blocks.{i}." for i in range(inputs)}
    names["M00"] = "middle_block."
    names |= {f"OUT{i:02d}": f"output_blocks.{i}." for i in range(outputs)}
    return names


def _ones(n: int, *at: range) -> tuple[float, ...]:
    return tuple(1.0 if any(i in r for r in at) else 0.0 for i in range(n))


_SD1_17 = (BASE, "IN01", "IN02", "IN04", "IN05", "IN07", "IN08", "M00",
           *(f"OUT{i:02d}" for i in range(3, 12)))  # fmt: skip
_SD1_LBW = LbwBlocks(
    _lbw_prefixes(12, 12),
    (_SD1_17, (BASE, *_lbw_prefixes(12, 12))),
    {
        "NONE": (0.0,) * 17, "ALL": (1.0,) * 17, "INS": _ones(17, range(0, 4)), "IND": _ones(17, range(4, 7)),
        "INALL": _ones(17, range(0, 7)), "MIDD": _ones(17, range(4, 12)), "OUTD": _ones(17, range(8, 12)),
        "OUTS": _ones(17, range(12, 17)), "OUTALL": _ones(17, range(8, 17)),
    },
)  # fmt: skip
_SDXL_12 = (BASE, "IN04", "IN05", "IN07", "IN08", "M00", *(f"OUT{i:02d}" for i in range(6)))
_SDXL_LBW = LbwBlocks(
    _lbw_prefixes(9, 9),
    (_SDXL_12, (BASE, *_lbw_prefixes(9, 9))),
    {
        "NONE": (0.0,) * 12, "ALL": (1.0,) * 12, "INALL": _ones(12, range(0, 5)),
        "MIDALL": _ones(12, range(0, 1), range(5, 6)), "OUTALL": _ones(12, range(0, 1), range(6, 12)),
    },
)  # fmt: skip

SD1_UNET = BlockTable(
    "sd1-unet",
    "SD1/SD2 UNet",
    "ModelMergeSD1",
    (
        "time_embed.", "label_emb.", *numbered("input_blocks", 12), *numbered("middle_block", 3),
        *numbered("output_blocks", 12), "out.",
    ),
    _SD1_LBW,
)  # fmt: skip
SDXL_UNET = BlockTable(
    "sdxl-unet",
    "SDXL UNet",
    "ModelMergeSDXL",
    (
        "time_embed.", "label_emb.", *numbered("input_blocks", 9, dot=False),
        *numbered("middle_block", 3, dot=False), *numbered("output_blocks", 9, dot=False), "out.",
    ),
    _SDXL_LBW,
)  # fmt: skip

BLOCKS = (SD1_UNET, SDXL_UNET)
