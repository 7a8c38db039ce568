"""File hashes as A1111 and Civitai show them in a picture's parameters, computed once per file.

``Model hash`` is the first 10 hex digits of the checkpoint's SHA-256 ("AutoV2"); a LoRA's hash
in ``Lora hashes`` is 12 digits of the SHA-256 of its data after the safetensors header (A1111's
``use_addnet_hash``; the whole file's for other formats). The digests come from the library's
:class:`~core.library.hashes.HashStore`: the sqlite cache when the file was hashed before (by the
background pass or an earlier picture, in this run or an earlier one), else one read whose result
goes into the cache.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from core.library.hashes import HashStore


class FileHashes:
    """The hashes a picture's parameters name, from ``store`` (a memory-only one by default)."""

    def __init__(self, store: HashStore | None = None) -> None:
        self.store = store if store is not None else HashStore()

    def sha256(self, path: Path, check: Callable[[], None] | None = None) -> str:
        return self.store.digest(path, check=check).sha256

    def model_hash(self, path: Path, check: Callable[[], None] | None = None) -> str:
        return self.store.digest(path, check=check).autov2

    def lora_hash(self, path: Path, check: Callable[[], None] | None = None) -> str:
        return self.store.digest(path, addnet=True, check=check).lora_hash
