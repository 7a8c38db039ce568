"""The fast listing pass: model files under each root, with sizes and times, no file opened.

Each folder is listed once, however many roots or symlinks lead to it (a symlink loop ends at the
folder it loops back to), and each file once, however many paths lead to it. A folder nested in
another root is left to that root, so it keeps that root's kind hint. Unreadable folders and
broken links become problems or error items, never exceptions.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.files.atomic import is_partial
from core.files.model_file import MODEL_EXTENSIONS
from core.files.shards import SHARD_NAME, is_later_shard
from core.library.sources import ModelRoot

#: Sidecars whose contents change what inspect reports (trigger words, base model).
INFO_SIDECARS = (".civitai.info", ".cm-info.json")


@dataclass(frozen=True)
class Listed:
    """A model file found by the listing pass. ``error`` is set when it cannot even be stat'ed."""

    path: Path
    root: ModelRoot
    folder: str
    real: str
    size: int
    mtime_ns: int
    siblings: frozenset[str] = field(repr=False)
    sidecars: str = ""  # signature of the info sidecars beside it ("" when none)
    error: tuple[str, str] | None = None  # (code, message)
    file_id: tuple[int, int] | None = None  # (st_dev, st_ino)


@dataclass
class Walker:
    """Lists ``roots``; ``problems`` collects what was skipped and why."""

    roots: Sequence[ModelRoot]
    check: Callable[[], None] | None = None
    problems: list[str] = field(default_factory=list)
    _visited: dict[tuple[int, int], str] = field(default_factory=dict)
    _files: set[str] = field(default_factory=set)
    _root_ids: set[tuple[int, int]] = field(default_factory=set)

    def __iter__(self) -> Iterator[list[Listed]]:
        """One list per folder (possibly empty), in listing order."""
        for root in self.roots:
            ident = _ident(root.path)
            if ident is not None:
                self._root_ids.add(ident)
        for root in self.roots:
            yield from self._walk_root(root)

    def _walk_root(self, root: ModelRoot) -> Iterator[list[Listed]]:
        try:
            st = os.stat(root.path)
        except OSError as exc:
            self.problems.append(f"{root.path} ({root.origin}) cannot be listed: {_why(exc)}; skipped")
            return
        if not os.path.isdir(root.path):
            if root.path.name.lower().endswith(MODEL_EXTENSIONS):
                real = os.path.realpath(root.path)
                if real not in self._files:
                    self._files.add(real)
                    names = _names(root.path.parent)
                    yield [self._listed(root, root.path, "", real, st, names)]
            else:
                self.problems.append(f"{root.path} ({root.origin}) is not a folder or a model file; skipped")
            return
        stack: list[tuple[Path, str]] = [(root.path, "")]
        top = True
        while stack:
            if self.check is not None:
                self.check()
            folder, rel = stack.pop()
            batch, subdirs = self._list_folder(root, folder, rel, top)
            top = False
            yield batch
            for name in reversed(subdirs):
                stack.append((folder / name, f"{rel}/{name}" if rel else name))

    def _list_folder(
        self, root: ModelRoot, folder: Path, rel: str, top: bool
    ) -> tuple[list[Listed], list[str]]:
        ident = _ident(folder)
        if ident is None:
            self.problems.append(f"{folder} cannot be listed (it vanished or is a broken link); skipped")
            return [], []
        if not top and ident in self._root_ids:
            return [], []  # another root; listed as that root
        if ident in self._visited:
            first = self._visited[ident]
            if not top or first != str(folder):
                self.problems.append(
                    f"{folder} leads to a folder already listed ({first}); skipped so no file shows twice"
                )
            return [], []
        self._visited[ident] = str(folder)
        try:
            with os.scandir(folder) as it:
                items = sorted(it, key=lambda d: (d.name.casefold(), d.name))
        except OSError as exc:
            self.problems.append(f"{folder} cannot be listed: {_why(exc)}; skipped")
            return [], []
        names = frozenset(d.name for d in items)
        real_folder = os.path.realpath(folder)
        files: list[Listed] = []
        subdirs: list[str] = []
        for item in items:
            if _is_dir(item):
                if not item.name.startswith("."):
                    subdirs.append(item.name)
                continue
            if is_partial(item.name) or not item.name.lower().endswith(MODEL_EXTENSIONS):
                continue  # a writer's partial file is never a model
            if is_later_shard(item.name):
                continue  # a split model is one entry: its first shard stands for all (core.files.shards)
            path = folder / item.name
            real = os.path.realpath(path) if item.is_symlink() else os.path.join(real_folder, item.name)
            if real in self._files:
                continue
            self._files.add(real)
            try:
                st = item.stat()
            except OSError as exc:
                files.append(_broken(root, path, rel, real, names, exc))
                continue
            files.append(self._listed(root, path, rel, real, st, names))
        return files, subdirs

    def _listed(
        self, root: ModelRoot, path: Path, rel: str, real: str, st: os.stat_result, names: frozenset[str]
    ) -> Listed:
        size, mtime = _shards_size(path, names, st)
        return Listed(
            path, root, rel, real, size, mtime, names, _sidecar_signature(path, names),
            file_id=(st.st_dev, st.st_ino),
        )  # fmt: skip


def _ident(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _is_dir(item: os.DirEntry[str]) -> bool:
    try:
        return item.is_dir()
    except OSError:  # a symlink loop on the entry itself (ELOOP)
        return False


def _names(folder: Path) -> frozenset[str]:
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return frozenset()


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _broken(root: ModelRoot, path: Path, rel: str, real: str, names: frozenset[str], exc: OSError) -> Listed:
    if isinstance(exc, FileNotFoundError) and path.is_symlink():
        target = os.readlink(path)
        code, message = "not_found", f"{path.name} is a link to {target}, which does not exist"
    else:
        code, message = "unreadable", f"{path.name} cannot be read: {_why(exc)}"
    return Listed(path, root, rel, real, 0, 0, names, "", (code, message))


def _sidecar_signature(path: Path, names: frozenset[str]) -> str:
    parts: list[str] = []
    for suffix in INFO_SIDECARS:
        name = path.stem + suffix
        if name in names:
            try:
                st = os.stat(path.with_name(name))
            except OSError:
                continue
            parts.append(f"{suffix}:{st.st_size}:{st.st_mtime_ns}")
    return "|".join(parts)


def _shards_size(path: Path, names: frozenset[str], st: os.stat_result) -> tuple[int, int]:
    """Size and newest mtime of a split model's shards beside its first one (a changed later shard
    makes the entry change); the file's own for any other file."""
    m = SHARD_NAME.match(path.name)
    if m is None or int(m["i"]) != 1:
        return st.st_size, st.st_mtime_ns
    size, mtime = st.st_size, st.st_mtime_ns
    n = int(m["n"])
    for i in range(2, n + 1):
        name = f"{m['stem']}-{i:05d}-of-{n:05d}{path.name[path.name.lower().rindex('.safetensors') :]}"
        if name in names:
            try:
                other = os.stat(path.with_name(name))
            except OSError:
                continue
            size, mtime = size + other.st_size, max(mtime, other.st_mtime_ns)
    return size, mtime
