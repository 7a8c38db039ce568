"""A read-only view of a file's tensor index that detection rules query.

Detection is a pure function of ``{key: TensorInfo}`` plus metadata. Rules ask "is this key
there?", "what is its shape?", "how many numbered blocks under this prefix?". The view answers
in O(1) after one O(n) pass, so a file with a million tensors is classified in seconds, and it
never mutates the mapping it was given.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator, Mapping
from functools import cached_property

from core.files.tensor_info import TensorInfo

_NUM = re.compile(r"\.(\d+)(?=\.|$)")


class KeyView(Mapping[str, TensorInfo]):
    """``tensors`` seen through an optional key prefix (``"model.diffusion_model."``)."""

    def __init__(self, tensors: Mapping[str, TensorInfo], prefix: str = "") -> None:
        self._all = tensors
        self.prefix = prefix
        if prefix:
            n = len(prefix)
            parent = tensors if isinstance(tensors, KeyView) else KeyView(tensors)
            self._own: Mapping[str, TensorInfo] = {
                k[n:]: tensors[k] for k in parent._keys_with_prefix(prefix)
            }
        else:
            self._own = tensors

    # Mapping protocol -------------------------------------------------------------------
    def __getitem__(self, key: str) -> TensorInfo:
        return self._own[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._own)

    def __len__(self) -> int:
        return len(self._own)

    def __contains__(self, key: object) -> bool:
        return key in self._own

    @cached_property
    def _sorted(self) -> list[str]:
        return sorted(self._own)

    def _keys_with_prefix(self, prefix: str) -> list[str]:
        """Keys starting with ``prefix``: a contiguous range of the sorted keys (two bisections)."""
        keys = self._sorted
        lo = bisect.bisect_left(keys, prefix)
        hi = bisect.bisect_left(keys, prefix[:-1] + chr(ord(prefix[-1]) + 1)) if prefix else len(keys)
        return keys[lo:hi]

    def has_prefix(self, prefix: str) -> bool:
        """Whether any key starts with ``prefix`` (O(log n))."""
        keys = self._sorted
        i = bisect.bisect_left(keys, prefix)
        return i < len(keys) and keys[i].startswith(prefix)

    # Queries ----------------------------------------------------------------------------
    def sub(self, prefix: str) -> KeyView:
        """A view of the keys under ``prefix`` with the prefix removed."""
        return KeyView(self._own, prefix)

    def shape(self, key: str) -> tuple[int, ...] | None:
        info = self._own.get(key)
        return info.shape if info is not None else None

    def dim(self, key: str, axis: int) -> int | None:
        s = self.shape(key)
        if s is None or len(s) <= abs(axis) - (1 if axis < 0 else 0) or len(s) == 0:
            return None
        try:
            return s[axis]
        except IndexError:
            return None

    def has_all(self, keys: Iterable[str]) -> bool:
        return all(k in self._own for k in keys)

    def has_any(self, keys: Iterable[str]) -> bool:
        return any(k in self._own for k in keys)

    def startswith_any(self, prefixes: tuple[str, ...]) -> bool:
        return any(k.startswith(prefixes) for k in self._own)

    @cached_property
    def _first_segments(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for k in self._own:
            head = k.split(".", 1)[0]
            out[head] = out.get(head, 0) + 1
        return out

    def top_level(self) -> dict[str, int]:
        """First key segments and how many keys start with each."""
        return dict(self._first_segments)

    def count_blocks(self, prefix: str) -> int:
        """Number of distinct ``prefix<N>.`` blocks (max N + 1), e.g. ``"joint_blocks."``."""
        n = len(prefix)
        best = -1
        for k in self._own:
            if k.startswith(prefix):
                rest = k[n:]
                num = rest.split(".", 1)[0]
                if num.isdigit():
                    best = max(best, int(num))
        return best + 1

    def keys_matching(self, pattern: str) -> list[str]:
        rx = re.compile(pattern)
        return [k for k in self._own if rx.search(k)]

    def params(self) -> int:
        return sum(v.numel for v in self._own.values())

    def nbytes(self) -> int:
        return sum(v.nbytes for v in self._own.values())
