"""Next-DiT's blocks (Z-Image: 30 layers; Lumina 2: 26). ComfyUI has no merge node for this
network; the table is Loadout's, in the style of its ``ModelMergeFlux1`` / ``ModelMergeQwenImage``:
the embedders, the two noise and two context refiners, each main layer, the final layer."""

from core.archs.blocks import BlockTable, numbered

NEXT_DIT = BlockTable(
    "next-dit",
    "Next-DiT (Z-Image, Lumina 2)",
    "",
    (
        "x_embedder.", "t_embedder.", "cap_embedder.", "x_pad_token", "cap_pad_token",
        *numbered("noise_refiner", 2), *numbered("context_refiner", 2), *numbered("layers", 30),
        "norm_final.", "final_layer.",
    ),
)  # fmt: skip

BLOCKS = (NEXT_DIT,)
