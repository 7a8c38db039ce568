"""Lumina 2's and Z-Image's prompt encodings: none yet (the decoder-LLM towers come with the
text-encoder stack); their records name no convention until then."""

from __future__ import annotations

from core.archs.protocols import TextConvention

CONVENTIONS: tuple[TextConvention, ...] = ()
