"""The text-encoder part of a LoRA on one prompt only (:mod:`core.patching.prompt_target`): each
prompt is encoded with exactly the text-encoder patches it carries -- the stack's LoRAs that act
everywhere, plus a LoRA put on a prompt only while that prompt (or a region of its side, or the
region it is put on) is encoded. ComfyUI: CreateHookLora -> SetClipHooks (``apply_to_conds``, no
``schedule_clip``) -> CLIPTextEncode, the hook's clip weights patched onto the text encoder while
it encodes the conditioning the hook is set on (``CLIP.encode_from_tokens`` with the patcher's
``forced_hooks``).

A prompt's *labels* are the hook labels of the conditioning its encoding becomes (``positive``,
``negative``, ``regionN`` with its side's). :meth:`ClipHooks.key` is the conditioning cache's
encoder state for those labels: the text encoders' identity and, per LoRA of the stack in order,
its file, the text-encoder strength that prompt is encoded with (0 for a LoRA on another prompt),
whether it is on and its block weights -- so an encoding made without a hook is never reused for a
prompt that carries it, nor the other way round. :meth:`ClipHooks.apply` brings the weights to a
prompt's labels before a cache miss is encoded: only the LoRAs whose text-encoder strength differs
from the one the weights have are changed (``set_clip``: the session's stack policy, baked on the
CPU, refreshed placed copies on a device), so a run of prompts with one hook set patches nothing
between them, and :meth:`ClipHooks.order` encodes the prompts of one call grouped by hook set, the
set the weights have now first. :meth:`ClipHooks.finish` (or leaving a ``with`` block) puts every
LoRA's text-encoder part back at its own strength.

A LoRA with a strength schedule (keyframes) has its text-encoder part at its own text-encoder
strength, the keyframes not applied: ComfyUI's SetClipHooks without ``schedule_clip`` (its default)
drops the hooks' keyframes for the text encoder (``set_keyframes_on_hooks(None)``), so the prompt is
encoded once at the hook's clip strength."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from core.patching.lora_stack import LoraEntry, LoraStack

#: sets one LoRA's text-encoder strength and makes the weights follow it
SetClip = Callable[[str, float], None]

#: labels of a conditioning no LoRA is put on (what a prompt encoded outside a generation carries)
NO_LABELS: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TextPart:
    """One LoRA of the stack as the text encoders see it."""

    lora: str  # its id on the stack
    path: str
    strength: float  # its own text-encoder strength
    enabled: bool
    block_weights: str  # as a tag writes them ("" none)
    #: the prompt it is put on (None: everywhere); None too when it has no text-encoder part
    on: str | None


def lbw_text(entry: LoraEntry) -> str:
    """A stack entry's block weights as a LoRA tag writes them ("" when none)."""
    return entry.block_weights.text() if entry.block_weights is not None else ""


def text_parts(entries: Sequence[LoraEntry]) -> tuple[TextPart, ...]:
    """The stack's LoRAs, in order, as the text encoders see them."""
    parts = []
    for e in entries:
        on = e.on if any(name != "diffusion_model" for name in e.keys) else None
        parts.append(TextPart(e.id, str(e.path), e.clip_strength, e.enabled, lbw_text(e), on))
    return tuple(parts)


@dataclass
class ClipHooks:
    """Which text-encoder patches each prompt is encoded with (see the module notes)."""

    #: the identity of the loaded text encoders (their load generations)
    encoders: Hashable
    parts: tuple[TextPart, ...]
    set_clip: SetClip
    #: the text-encoder strength each hooked LoRA has now (set by :meth:`apply`)
    current: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.current = {p.lora: p.strength for p in self._hooked()}

    def _hooked(self) -> list[TextPart]:
        return [p for p in self.parts if p.on is not None and p.enabled]

    def strength(self, part: TextPart, labels: frozenset[str]) -> float:
        """The text-encoder strength ``part`` has while a prompt of ``labels`` is encoded."""
        return part.strength if part.on is None or part.on in labels else 0.0

    def wanted(self, labels: frozenset[str]) -> tuple[tuple[str, float], ...]:
        """The hooked LoRAs' text-encoder strengths for a prompt of ``labels``."""
        return tuple((p.lora, self.strength(p, labels)) for p in self._hooked())

    def stack_key(self) -> Hashable:
        """The encoder state of the stack as it is (every LoRA's text-encoder part everywhere)."""
        return (self.encoders, tuple((p.path, p.strength, p.enabled, p.block_weights) for p in self.parts))

    def key(self, labels: frozenset[str]) -> Hashable:
        """The conditioning cache's encoder state of a prompt of ``labels``."""
        parts = tuple((p.path, self.strength(p, labels), p.enabled, p.block_weights) for p in self.parts)
        return (self.encoders, parts)

    def order(self, labels: Sequence[frozenset[str]]) -> list[int]:
        """The indices of prompts of ``labels`` in the order to encode them: grouped by the
        patches they carry, the group the weights have now first (stable within a group)."""
        now = tuple(self.current.items())
        wanted = [self.wanted(group) for group in labels]
        groups = list(dict.fromkeys([now, *wanted]))
        return sorted(range(len(labels)), key=lambda i: groups.index(wanted[i]))

    def apply(self, labels: frozenset[str]) -> None:
        """The weights with the text-encoder patches a prompt of ``labels`` carries."""
        for lora, strength in self.wanted(labels):
            if self.current[lora] != strength:
                self.set_clip(lora, strength)
                self.current[lora] = strength

    def finish(self) -> None:
        """Each hooked LoRA's text-encoder part back at its own strength."""
        for p in self._hooked():
            if self.current[p.lora] != p.strength:
                self.set_clip(p.lora, p.strength)
                self.current[p.lora] = p.strength

    def __enter__(self) -> ClipHooks:
        return self

    def __exit__(self, *exc: object) -> None:
        """:meth:`finish`, also after a stop or an error."""
        self.finish()


class StackControl(Protocol):
    """A session's LoRA stack and its policy (:class:`core.session.loras.LoraControl`)."""

    stack: LoraStack | None

    def set_strength(self, lora_id: str, model: float | None, clip: float | None, bake: bool) -> object: ...


def session_clip_hooks(loras: StackControl, encoders: Hashable) -> ClipHooks:
    """The text-encoder hooks of a session's stack as it is now; ``encoders``: the identity of the
    text encoders a generation uses."""
    entries = list(loras.stack.entries.values()) if loras.stack is not None else []

    def set_clip(lora: str, strength: float) -> None:
        loras.set_strength(lora, None, strength, bake=True)

    return ClipHooks(encoders, text_parts(entries), set_clip)


__all__ = [
    "NO_LABELS", "ClipHooks", "SetClip", "StackControl", "TextPart", "lbw_text", "session_clip_hooks",
    "text_parts",
]  # fmt: skip
