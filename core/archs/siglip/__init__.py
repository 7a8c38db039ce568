"""SigLIP's vision tower (so400m, patch 14, 384), the image encoder FLUX Redux reads: the network
(:mod:`.network`) and its record for the catalog (:mod:`.layout`)."""

from core.archs.siglip.layout import SIGLIP_SO400M
from core.archs.siglip.network import SiglipVision, SiglipVisionConfig

#: read by ``core.archs.catalog``
IMAGE_ENCODER = SIGLIP_SO400M

__all__ = ["IMAGE_ENCODER", "SIGLIP_SO400M", "SiglipVision", "SiglipVisionConfig"]
