"""A small thread-safe least-recently-used map: the one the engine's caches by structure use
(validated safetensors headers, detection memos). ``functools.lru_cache`` does not fit them: their
entries are put by the code that computed them, and read without computing."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
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

    def get_or_put(self, key: K, make: Callable[[], V]) -> V:
        """The entry for ``key``, made (under the lock: keep ``make`` cheap) when missing."""
        with self._lock:
            value = self._items.get(key)
            if value is None:
                value = self._items[key] = make()
                self._trim()
            else:
                self._items.move_to_end(key)
            return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

    def _trim(self) -> None:
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)
