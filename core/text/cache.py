"""A small LRU of prompt conditionings, so a new seed or a UNet LoRA strength does not re-encode.

The key is (encoder state, family, options, prompt, the reference pictures an edit's prompt
encoding read). *Encoder state* is whatever identifies the
text towers' weights as they are now: the caller passes a hashable value built from the loaded
model's identity and the text-encoder side of its LoRA stack (file, clip strength per LoRA), so a
changed clip strength misses and a changed model strength does not.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Final

from core.lru import LruCache
from core.text.conditioning import EncodeOptions, PromptConditioning, TextFamily

DEFAULT_ENTRIES: Final = 16


@dataclass(frozen=True)
class CacheKey:
    encoder_state: Hashable
    family: TextFamily
    options: EncodeOptions
    prompt: str
    #: the SHA-256s of the reference pictures the prompt encoding read (none for most families)
    pictures: tuple[str, ...] = ()


class ConditioningCache:
    """Least-recently-used map CacheKey -> PromptConditioning with ``capacity`` entries."""

    def __init__(self, capacity: int = DEFAULT_ENTRIES) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self.capacity = capacity
        self._entries: LruCache[CacheKey, PromptConditioning] = LruCache(capacity)
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get_or_encode(self, key: CacheKey, encode: Callable[[str], PromptConditioning]) -> PromptConditioning:
        found = self._entries.get(key)
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        value = encode(key.prompt)  # not under the cache's lock: encoding takes seconds
        self._entries.put(key, value)
        return value

    def clear(self) -> None:
        self._entries.clear()
