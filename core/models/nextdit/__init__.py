"""Next-DiT (ComfyUI's ``lumina2`` architecture): Lumina 2 / NetaYume and Z-Image (Turbo, Base).

Everything Loadout knows of the network lives here: its config and forms (``config``), the
transformer (``network``), the key maps of the layouts it ships in (``keys``) and its activation
memory profile (``memory``).
"""

from core.models.nextdit.config import NextDiTConfig
from core.models.nextdit.network import NextDiT

__all__ = ["NextDiT", "NextDiTConfig"]
