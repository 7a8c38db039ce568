"""The FLUX.1 package: the network (:mod:`.net`), its diffusers key map (:mod:`.keys`), Flux's
prompt encoding (:mod:`.text`) and its ControlNets (:mod:`.controlnet`, :mod:`.controlnet_files`)."""

from core.archs.flux.blocks import BLOCKS
from core.archs.flux.controlnet_files import CONTROLNETS
from core.archs.flux.net import NET
from core.archs.flux.references import REFERENCES
from core.archs.flux.text import CONVENTIONS

__all__ = ["BLOCKS", "CONTROLNETS", "CONVENTIONS", "NET", "REFERENCES"]
