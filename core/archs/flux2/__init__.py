"""The FLUX.2 package (klein 4B / 9B, dev): the network's calling convention, memory models and
adapter names (:mod:`.net`), its file layouts (:mod:`.keys`), klein's prompt encodings
(:mod:`.text`) and the FLUX.2 VAE's codec (:mod:`.codec`: 32 channels, 2x2-packed into 128 and
batch-norm normalised). The networks themselves are ``core.models.flux2`` and
``core.models.flux2_vae``."""

from core.archs.flux2.codec import CODEC
from core.archs.flux2.net import NET
from core.archs.flux2.references import REFERENCES
from core.archs.flux2.text import CONVENTIONS

__all__ = ["CODEC", "CONVENTIONS", "NET", "REFERENCES"]
