"""FLUX.2's reference pictures (klein and dev): each scaled to one megapixel (1024 x 1024 pixels
of area) with its aspect ratio, Lanczos, as ComfyUI's FLUX.2 edit templates do with
``ImageScaleToTotalPixels`` before ``VAEEncode`` -> ``ReferenceLatent``; up to ten, BFL's limit.

Difference from diffusers: ``Flux2Pipeline`` / ``Flux2KleinPipeline`` only shrink a picture over
one megapixel and never enlarge a smaller one; Loadout scales both ways, as ComfyUI does."""

from __future__ import annotations

from core.archs.references import TotalArea

FLUX2_REFERENCES = TotalArea("flux2", area=1024 * 1024, most=10, method="lanczos")
REFERENCES = (FLUX2_REFERENCES,)
