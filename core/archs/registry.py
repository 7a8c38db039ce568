"""One registry per kind of part (diffusion networks, text conventions, latent codecs): items
keyed by their ``id``, a duplicate refused, a lookup of an unknown id answered with the ids there
are (PEFT's variant registry, typed)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, TypeVar


class HasId(Protocol):
    @property
    def id(self) -> str: ...


T = TypeVar("T", bound=HasId)


class UnknownPart(KeyError):
    """A record names an id no package registered (a programming error, caught by the tests)."""


class Registry(Generic[T]):
    def __init__(self, kind: str, items: Iterable[T] = ()) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        for item in items:
            self.add(item)

    def add(self, item: T) -> T:
        if not item.id:
            raise ValueError(f"a {self.kind} needs an id")
        if item.id in self._items:
            raise ValueError(f"the {self.kind} id {item.id!r} is registered twice")
        self._items[item.id] = item
        return item

    def __getitem__(self, key: str) -> T:
        try:
            return self._items[key]
        except KeyError:
            raise UnknownPart(f"no {self.kind} {key!r}; there are: {', '.join(self._items)}") from None

    def get(self, key: str | None) -> T | None:
        return self._items.get(key) if key is not None else None

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[T]:
        return iter(self._items.values())

    def ids(self) -> tuple[str, ...]:
        return tuple(self._items)
