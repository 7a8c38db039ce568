"""The SD3 / SD3.5 MMDiT package: the network (:mod:`.net`), its diffusers key map (:mod:`.keys`),
SD3's prompt encoding (:mod:`.text`) and the SD3 / SD3.5 ControlNets (:mod:`.controlnet`, loaded
through :mod:`.controlnet_load`)."""

from core.archs.mmdit.controlnet_load import CONTROLNET
from core.archs.mmdit.net import NET
from core.archs.mmdit.text import CONVENTIONS

CONTROLNETS = (CONTROLNET,)

__all__ = ["CONTROLNETS", "CONVENTIONS", "NET"]
