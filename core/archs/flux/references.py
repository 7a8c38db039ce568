"""FLUX.1 Kontext's reference pictures: each scaled to the preferred resolution (BFL's list, the
one ComfyUI's ``FluxKontextImageScale`` and diffusers' ``FluxKontextPipeline`` use) whose aspect
ratio is closest to the picture's, Lanczos, centre-cropped to that ratio."""

from __future__ import annotations

from core.archs.references import PreferredSizes

#: (width, height), from tall to wide
KONTEXT_SIZES: tuple[tuple[int, int], ...] = (
    (672, 1568), (688, 1504), (720, 1456), (752, 1392), (800, 1328), (832, 1248), (880, 1184),
    (944, 1104), (1024, 1024), (1104, 944), (1184, 880), (1248, 832), (1328, 800), (1392, 752),
    (1456, 720), (1504, 688), (1568, 672),
)  # fmt: skip

#: ComfyUI chains ReferenceLatent nodes for several pictures (its "offset" method); BFL trained on one
KONTEXT = PreferredSizes("kontext", KONTEXT_SIZES, most=3)
REFERENCES = (KONTEXT,)
