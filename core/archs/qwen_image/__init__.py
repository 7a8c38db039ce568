"""The Qwen-Image package: the MMDiT's calling convention, memory model and file layouts
(:mod:`.net`), its prompt encoding (:mod:`.text`: Qwen2.5-VL-7B in ComfyUI's template, the
template's tokens dropped), InstantX's ControlNets (:mod:`.controlnet`) and DiffSynth's
blockwise ones (:mod:`.blockwise`); the network itself is
``core.models.qwen_image``."""

from core.archs.qwen_image.blockwise import LOADER as BLOCKWISE
from core.archs.qwen_image.controlnet import INSTANTX
from core.archs.qwen_image.net import NET
from core.archs.qwen_image.references import REFERENCES
from core.archs.qwen_image.text import CONVENTIONS

#: InstantX's ControlNets and DiffSynth's blockwise ones
CONTROLNETS = (INSTANTX, BLOCKWISE)

__all__ = ["CONTROLNETS", "CONVENTIONS", "NET", "REFERENCES"]
