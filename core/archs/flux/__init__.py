"""The FLUX.1 package: the network (:mod:`.net`), its diffusers key map (:mod:`.keys`), Flux's
prompt encoding (:mod:`.text`), its ControlNets (:mod:`.controlnet`, :mod:`.controlnet_files`) and
FLUX Redux (:mod:`.redux`)."""

from core.archs.flux.blocks import BLOCKS
from core.archs.flux.controlnet_files import CONTROLNETS
from core.archs.flux.net import NET
from core.archs.flux.redux import REDUX
from core.archs.flux.references import REFERENCES
from core.archs.flux.text import CONVENTIONS

#: FLUX Redux, the style model of the FLUX.1 models (read by ``core.archs.catalog``)
STYLE_MODELS = (REDUX,)

__all__ = ["BLOCKS", "CONTROLNETS", "CONVENTIONS", "NET", "REFERENCES", "STYLE_MODELS"]
