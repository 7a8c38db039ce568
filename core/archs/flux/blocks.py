"""FLUX.1's blocks: ComfyUI's ``ModelMergeFlux1`` arguments (19 double and 38 single blocks)."""

from core.archs.blocks import BlockTable, numbered

FLUX1 = BlockTable(
    "flux1",
    "FLUX.1",
    "ModelMergeFlux1",
    (
        "img_in.", "time_in.", "guidance_in", "vector_in.", "txt_in.", *numbered("double_blocks", 19),
        *numbered("single_blocks", 38), "final_layer.",
    ),
)  # fmt: skip

BLOCKS = (FLUX1,)
