"""Next-DiT (ComfyUI's ``lumina2`` architecture): Lumina 2 / NetaYume and Z-Image (Turbo, Base).

The network itself: its config and forms (``config``) and the transformer (``network``). Its
package ``core.archs.nextdit`` holds the rest: the key maps of the layouts it ships in, its
calling convention and its activation-memory models.
"""

from core.models.nextdit.config import NextDiTConfig
from core.models.nextdit.network import NextDiT

__all__ = ["NextDiT", "NextDiTConfig"]
