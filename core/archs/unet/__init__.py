"""The SD-family UNet package: the network (:mod:`.net`), its diffusers key map (:mod:`.keys`) and
the SD1/SD2/SDXL/refiner prompt encodings (:mod:`.text`)."""

from core.archs.unet.blocks import BLOCKS
from core.archs.unet.net import NET
from core.archs.unet.text import CONVENTIONS

__all__ = ["BLOCKS", "CONVENTIONS", "NET"]
