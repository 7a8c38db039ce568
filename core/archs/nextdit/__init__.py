"""The Next-DiT package (Lumina 2 / NetaYume, Z-Image): the network's calling convention, memory
models and adapter names (:mod:`.net`) and its file layouts (:mod:`.keys`); the network itself is
``core.models.nextdit``. Its prompt encodings (Qwen3-4B and Gemma-2-2B in ComfyUI's templates)
are :mod:`.text`; its ControlNet kinds (Z-Image's Fun ControlNet) :mod:`.controlnets`."""

from core.archs.nextdit.blocks import BLOCKS
from core.archs.nextdit.controlnets import CONTROLNETS
from core.archs.nextdit.net import NET
from core.archs.nextdit.text import CONVENTIONS

__all__ = ["BLOCKS", "CONTROLNETS", "CONVENTIONS", "NET"]
