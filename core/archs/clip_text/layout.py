"""CLIP's text tower as the loader builds it: one :class:`~core.archs.layouts.Architecture` for
CLIP-L, -H and -G, in the transformers layout (``text_model.*``) or open_clip's (SD2's and SDXL's
checkpoints: ``transformer.resblocks.N.*``, converted by :mod:`core.archs.clip_text.keys`)."""

from __future__ import annotations

from core.archs.clip_text.keys import hf_to_open_clip, open_clip_to_hf
from core.archs.layouts import Architecture, Tensors
from core.models.clip import CLIPTextConfig, CLIPTextModel

#: the families this tower is, by their number of layers (12 CLIP-L, 24 CLIP-H, 32 CLIP-G)
CLIP_LAYERS = {"clip-l": 12, "clip-h": 24, "clip-g": 32}


def clip_layers(t: Tensors) -> int:
    """How many layers the tensors' tower has, in either layout."""
    n = 0
    while (
        f"transformer.resblocks.{n}.ln_1.weight" in t
        or f"text_model.encoder.layers.{n}.layer_norm1.weight" in t
    ):
        n += 1
    return n


CLIP_ARCHITECTURE = Architecture(
    "clip-text",
    "text_encoder",
    tuple(CLIP_LAYERS),
    configure=lambda shapes, family: CLIPTextConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: CLIPTextModel(cfg, device=device, dtype=dtype),
    to_module={
        "open_clip": lambda t, fam: open_clip_to_hf(
            {k: v for k, v in t.items() if not k.startswith("visual.") and k != "logit_scale"},
            num_layers=clip_layers(t),
        )
    },
    to_file={"open_clip": lambda t, fam: hf_to_open_clip(t, num_layers=clip_layers(t))},
    harmless=frozenset({"text_model.embeddings.position_ids", "logit_scale"}),
)
