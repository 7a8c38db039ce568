"""Textual-inversion embeddings: files of learned token vectors, used in a prompt by name.

Facts followed (ComfyUI ``sd1_clip.load_embed`` / ``_try_get_embedding``, A1111
``textual_inversion.py``):

- A name is looked up in each embeddings folder in order: ``folder/NAME`` when that is a file,
  else ``folder/NAME.safetensors``, ``.pt``, ``.bin``; a name that leaves the folder (``../x``) is
  not looked up there. ``embedding:sub/name`` reaches a subfolder.
- The vectors a text tower takes from a file: A1111 ``.pt`` files (``string_to_param``): the first
  parameter, whatever the tower; otherwise the tensor named after the tower (``clip_l``,
  ``clip_g``, ``clip_h``: SDXL files carry ``clip_l`` + ``clip_g``); otherwise the file's first
  tensor (``emb_params``, diffusers' ``<token>``). A tower whose width differs from those vectors'
  leaves the embedding out (ComfyUI warns and pads the window's end instead).
- Bare names (A1111): a whole word of the prompt equal to an embedding's file name (without
  extension, any case; A1111 matches the name's tokens, and CLIP lower-cases) is that embedding.
- Files are read without running code: safetensors, or pickles through torch's weights-only reader
  after Loadout's own restricted reader has looked at them (:mod:`core.files.pickle_safe`).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final

import torch

from core.detect.aux_kinds import match_embedding
from core.detect.keyview import KeyView
from core.errors import FileFormatError, LoadoutError
from core.files.model_file import TensorIndex, read_tensor_index
from core.files.pickle_safe import load_pickle_state_dict
from core.files.safetensors import SafetensorsFile

#: the extensions tried after a name, in ComfyUI's order
EXTENSIONS: Final = (".safetensors", ".pt", ".bin")
_A1111_PARAM: Final = "string_to_param."
_FLOATS: Final = frozenset({"F32", "F16", "BF16", "F64"})


@dataclass(frozen=True)
class TextualInversion:
    """One embedding file's tensors as stored (float32, on the CPU)."""

    name: str  # the file name without extension
    path: Path
    tensors: Mapping[str, torch.Tensor]
    family: str | None = None  # the diffusion family it was trained for, when the widths say

    def vectors_for(self, key: str) -> torch.Tensor:
        """(vectors, width) for the text tower ``key`` (``clip_l``, ``clip_g``, ``clip_h``, ...)."""
        params = [k for k in self.tensors if k.startswith(_A1111_PARAM)]
        if params:
            chosen = self.tensors[params[0]]
        elif key in self.tensors:
            chosen = self.tensors[key]
        else:
            chosen = next(iter(self.tensors.values()))
        return chosen.reshape(-1, chosen.shape[-1])

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(int(t.shape[-1]) for t in self.tensors.values()))


@dataclass(frozen=True)
class FoundVectors:
    """What a tower takes from an embedding named in a prompt: the file and its vectors."""

    name: str
    path: Path
    vectors: torch.Tensor  # (n, width), float32


def _not_embedding(path: Path, why: str) -> FileFormatError:
    return FileFormatError(
        f"{path.name} is not a textual-inversion embedding",
        why=why,
        fix="Put only embedding files (A1111 .pt or .safetensors) in the embeddings folder",
        code="not_a_model",
    )


def _layout(index: TensorIndex) -> bool:
    """Whether the tensors are one of the embedding layouts (any width: :mod:`core.detect.aux_kinds`
    names the family from the widths of real files)."""
    keys = set(index.tensors) - {k for k in index.tensors if k.startswith("string_to_token.")}
    shapes_ok = all(index.tensors[k].dtype in _FLOATS and 1 <= len(index.tensors[k].shape) <= 2 for k in keys)
    a1111 = len(keys) == 1 and next(iter(keys)).startswith(_A1111_PARAM)
    single = keys == {"emb_params"} or (len(keys) == 1 and next(iter(keys)).startswith("<"))
    return shapes_ok and (a1111 or single or keys == {"clip_l", "clip_g"})


def read_embedding(path: Path) -> TextualInversion:
    """The embedding in ``path`` (safetensors or a pickle, never run), checked to be one."""
    index = read_tensor_index(path)
    if not _layout(index):
        raise _not_embedding(
            path, "its tensors are none of the embedding layouts (A1111, SDXL pair, diffusers)"
        )
    found = match_embedding(KeyView(index.tensors))
    if index.format == "safetensors":
        with SafetensorsFile(path, header=index.header) as f:
            tensors = {k: f.read_tensor(k) for k in f}
    elif index.format == "pickle":
        tensors = load_pickle_state_dict(path)
    else:
        raise _not_embedding(path, f"it is a {index.format} file")
    kept = {k: v.float() for k, v in tensors.items() if not k.startswith("string_to_token.")}
    if not kept or any(not torch.isfinite(v).all() for v in kept.values()):
        raise _not_embedding(path, "its vectors are missing or not finite")
    return TextualInversion(path.stem, path, MappingProxyType(kept), found.family if found else None)


def _mtime(folder: Path) -> int:
    try:
        return folder.stat().st_mtime_ns
    except OSError:
        return 0


def _inside(folder: Path, candidate: Path) -> bool:
    try:
        return os.path.commonpath((folder, candidate)) == str(folder)
    except ValueError:
        return False


class EmbeddingFolders:
    """The embeddings folders of a library (ComfyUI's ``models/embeddings``, A1111's
    ``embeddings``), searched in order; files are read once and kept while unchanged."""

    def __init__(self, folders: tuple[Path, ...]) -> None:
        self.folders = folders
        self._read: dict[Path, tuple[tuple[int, int], TextualInversion]] = {}
        self._names: dict[str, Path] | None = None
        self._pattern: re.Pattern[str] | None = None
        self._stamp: tuple[tuple[str, int], ...] = ()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"EmbeddingFolders({self.folders!r})"

    @classmethod
    def of(cls, folders: Iterable[Path]) -> EmbeddingFolders:
        found = (Path(os.path.abspath(f)) for f in folders)
        return cls(tuple(dict.fromkeys(f for f in found if f.is_dir())))

    @property
    def key(self) -> tuple[tuple[str, int], ...]:
        """What identifies these folders and their listing in a conditioning cache key: each folder
        with its modification time, so an embedding added or removed since is seen (the names
        are listed again) and prompts encoded before are encoded again."""
        stamp = tuple((str(f), _mtime(f)) for f in self.folders)
        with self._lock:
            if stamp != self._stamp:
                self._stamp, self._names, self._pattern = stamp, None, None
        return stamp

    def find(self, name: str) -> Path | None:
        """The file ``name`` means, by ComfyUI's rule (see the module notes)."""
        for folder in self.folders:
            candidate = Path(os.path.abspath(folder / name))
            if not _inside(folder, candidate):
                continue
            if candidate.is_file():
                return candidate
            for ext in EXTENSIONS:
                with_ext = candidate.with_name(candidate.name + ext)
                if with_ext.is_file():
                    return with_ext
        return None

    def names(self) -> Mapping[str, Path]:
        """Lower-cased file names (no extension) -> file, for bare names; the first folder wins."""
        with self._lock:
            if self._names is None:
                found: dict[str, Path] = {}
                for folder in self.folders:
                    for path in sorted(folder.rglob("*")):
                        if path.suffix.lower() in EXTENSIONS and path.is_file():
                            found.setdefault(path.stem.lower(), path)
                self._names = found
            return self._names

    def bare_pattern(self) -> re.Pattern[str] | None:
        """A whole-word pattern of every embedding name (longest first), or None when there are none."""
        names = self.names()
        if not names:
            return None
        if self._pattern is None:
            alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
            self._pattern = re.compile(rf"(?<![\w\-.:])(?:{alternatives})(?![\w\-])", re.IGNORECASE)
        return self._pattern

    def path_for_bare(self, word: str) -> Path | None:
        return self.names().get(word.lower())

    def read(self, path: Path) -> TextualInversion:
        stat = path.stat()
        stamp = (stat.st_size, stat.st_mtime_ns)
        with self._lock:
            kept = self._read.get(path)
            if kept is not None and kept[0] == stamp:
                return kept[1]
        embedding = read_embedding(path)
        with self._lock:
            self._read[path] = (stamp, embedding)
        return embedding


NO_EMBEDDINGS: Final = EmbeddingFolders(())


@dataclass(frozen=True)
class TowerEmbeddings:
    """What one text tower needs to place embeddings: the folders, its key and its width
    (None: the tower takes no embedding vectors, e.g. T5; every one is left out)."""

    folders: EmbeddingFolders
    key: str
    width: int | None

    def lookup(self, name: str, *, bare: bool = False) -> FoundVectors | None:
        """The vectors ``name`` gives this tower; None when no file has that name. A file that is
        not an embedding is refused in words."""
        path = self.folders.path_for_bare(name) if bare else self.folders.find(name)
        if path is None:
            return None
        embedding = self.folders.read(path)
        return FoundVectors(name, path, embedding.vectors_for(self.key))

    def bare_pattern(self) -> re.Pattern[str] | None:
        """Bare names, for a tower that takes embeddings (a T5 prompt keeps such a word as text)."""
        return self.folders.bare_pattern() if self.width is not None else None


def width_note(name: str, made_width: int, tower: str, width: int | None) -> str:
    """Why an embedding was left out of one tower's prompt."""
    if width is None:
        return f"embedding {name!r} was left out of the {tower} prompt (it takes no embeddings)"
    return (
        f"embedding {name!r} ({made_width} wide) was left out of the {tower} prompt: "
        f"that text encoder is {width} wide (the embedding was made for another model)"
    )


def embedding_error(name: str, exc: LoadoutError) -> LoadoutError:
    """A prompt's embedding that could not be read, said with its name."""
    return LoadoutError(
        f"the prompt's embedding {name!r} cannot be used: {exc.what}",
        why=exc.why,
        fix=exc.fix,
        code=exc.code,
    )


def tower_key(encoder: str) -> str:
    """A CLIP tower's key in SDXL embedding files (``clip-l`` -> ``clip_l``)."""
    return encoder.replace("-", "_")
