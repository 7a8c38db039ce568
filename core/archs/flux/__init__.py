"""The FLUX.1 package: the network (:mod:`.net`), its diffusers key map (:mod:`.keys`) and Flux's
prompt encoding (:mod:`.text`)."""

from core.archs.flux.blocks import BLOCKS
from core.archs.flux.net import NET
from core.archs.flux.references import REFERENCES
from core.archs.flux.text import CONVENTIONS

__all__ = ["BLOCKS", "CONVENTIONS", "NET", "REFERENCES"]
