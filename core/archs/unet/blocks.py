"""The SD1/SD2 and SDXL UNets' blocks: ComfyUI's ``ModelMergeSD1`` (also its ``ModelMergeSD2``)
and ``ModelMergeSDXL`` arguments. ComfyUI writes SDXL's block prefixes without a final dot
(``input_blocks.1`` also starts ``input_blocks.10``, which SDXL does not have)."""

from core.archs.blocks import BlockTable, numbered

SD1_UNET = BlockTable(
    "sd1-unet",
    "SD1/SD2 UNet",
    "ModelMergeSD1",
    (
        "time_embed.", "label_emb.", *numbered("input_blocks", 12), *numbered("middle_block", 3),
        *numbered("output_blocks", 12), "out.",
    ),
)  # fmt: skip
SDXL_UNET = BlockTable(
    "sdxl-unet",
    "SDXL UNet",
    "ModelMergeSDXL",
    (
        "time_embed.", "label_emb.", *numbered("input_blocks", 9, dot=False),
        *numbered("middle_block", 3, dot=False), *numbered("output_blocks", 9, dot=False), "out.",
    ),
)  # fmt: skip

BLOCKS = (SD1_UNET, SDXL_UNET)
