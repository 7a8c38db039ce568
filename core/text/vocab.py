"""The CLIP byte-pair vocabulary, read from the file the ``open_clip_torch`` package ships.

The vocabulary is a dependency, not a copy: ``bpe_simple_vocab_16e6.txt.gz`` (OpenAI's CLIP BPE
merges) is found in open_clip's installed package folder *without importing open_clip* (its
``__init__`` imports torchvision, which Loadout does not install), through the import system's
package location and, failing that, the distribution's file list.

Token ids follow OpenAI's construction: the 256 byte symbols, the same with the end-of-word mark
``</w>``, one token per merge (in merge order), then start-of-text (49406) and end-of-text (49407).
This is the same table as the ``vocab.json`` that ComfyUI and Hugging Face ship for CLIP-L.
"""

from __future__ import annotations

import gc
import gzip
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

from core.errors import LoadoutError

VOCAB_FILE: Final = "bpe_simple_vocab_16e6.txt.gz"
OPEN_CLIP_PIN: Final = "open_clip_torch==3.3.0"
#: merges used by CLIP: the file's lines 1 .. 48894 (line 0 is a version header)
MERGE_COUNT: Final = 49152 - 256 - 2
START_OF_TEXT: Final = "<|startoftext|>"
END_OF_TEXT: Final = "<|endoftext|>"
START_ID: Final = 49406
END_ID: Final = 49407
VOCAB_SIZE: Final = 49408


class VocabularyMissing(LoadoutError):
    code = "tokenizer_missing"


def find_vocab_file() -> Path:
    """Path of open_clip's BPE file, found without importing the package; a LoadoutError if absent."""
    candidates: list[Path] = []
    bundle = getattr(sys, "_MEIPASS", None)  # the frozen app carries the file (packaging/loadout.spec)
    if bundle is not None:
        candidates.append(Path(bundle) / "open_clip" / VOCAB_FILE)
    try:
        spec = importlib.util.find_spec("open_clip")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / VOCAB_FILE for p in spec.submodule_search_locations]
    try:
        files = importlib.metadata.distribution("open_clip_torch").files or []
        candidates += [Path(str(f.locate())) for f in files if f.name == VOCAB_FILE]
    except importlib.metadata.PackageNotFoundError:
        pass
    for path in candidates:
        if path.is_file():
            return path
    raise VocabularyMissing(
        "The CLIP tokenizer vocabulary (open_clip's bpe_simple_vocab_16e6.txt.gz) was not found",
        why="Loadout reads CLIP's byte-pair vocabulary from the open_clip_torch package; it is not installed",
        fix=f"Install {OPEN_CLIP_PIN} without its dependencies (the installer and scripts/test do)",
    )


def bytes_to_symbols() -> list[str]:
    """The 256 printable stand-ins of the byte values, in CLIP's (and GPT-2's) vocabulary order."""
    ranges = (("!", "~"), ("¡", "¬"), ("®", "ÿ"))
    printable = [b for lo, hi in ranges for b in range(ord(lo), ord(hi) + 1)]
    symbols = [chr(b) for b in printable]
    others = [b for b in range(256) if b not in printable]
    return symbols + [chr(256 + i) for i in range(len(others))]


@dataclass(frozen=True)
class ClipVocabulary:
    """Token -> id table and the ordered merges of CLIP's BPE."""

    vocab: dict[str, int]
    merges: list[tuple[str, str]]
    source: Path


@cache
def load_vocabulary(path: Path | None = None) -> ClipVocabulary:
    """Read the merges file (gzip text) and build CLIP's 49,408-token table."""
    source = find_vocab_file() if path is None else path
    try:
        # only the lines used: splitting all 262k in one call held the GIL ~100 ms (a GUI stutter)
        lines = gzip.decompress(source.read_bytes()).decode("utf-8").split("\n", MERGE_COUNT + 1)
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise VocabularyMissing(
            f"{source} is not a readable CLIP vocabulary",
            why=str(exc),
            fix=f"Reinstall {OPEN_CLIP_PIN} without its dependencies (the installer and scripts/test do)",
        ) from exc
    # 49k small lists at once make the cyclic GC run over the whole heap several times (100 ms with
    # the GIL held: the window stutters); nothing here can form a cycle, so it is paused meanwhile
    enabled = gc.isenabled()
    gc.disable()
    try:
        pairs = [line.split() for line in lines[1 : MERGE_COUNT + 1]]
    finally:
        if enabled:
            gc.enable()
    if len(pairs) != MERGE_COUNT or any(len(p) != 2 for p in pairs):
        raise VocabularyMissing(
            f"{source} does not hold CLIP's {MERGE_COUNT} merges",
            why="the file is truncated or is another vocabulary",
            fix=f"Reinstall {OPEN_CLIP_PIN} without its dependencies (the installer and scripts/test do)",
        )
    merges = [(a, b) for a, b in pairs]
    symbols = bytes_to_symbols()
    tokens = symbols + [s + "</w>" for s in symbols] + [a + b for a, b in merges]
    tokens += [START_OF_TEXT, END_OF_TEXT]
    return ClipVocabulary({t: i for i, t in enumerate(tokens)}, merges, source)
