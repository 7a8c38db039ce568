"""A small thread-safe least-recently-used map for the caches ``functools.lru_cache`` does not fit:
validated safetensors headers (put by the full read that computed them, read by the next file of
the same structure without computing) and prompt conditionings (counted hits, the encode outside
the lock). Detection memos are a plain ``functools.lru_cache`` (core/inspect.py)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()  # the library scan and the window may read on two threads

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            self._trim()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

    def _trim(self) -> None:
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)
