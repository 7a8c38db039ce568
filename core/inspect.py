"""``loadout inspect``: what a model file is, from its header alone, as the JSON contract.

Never raises for a bad file: the error goes into the record (``error: {code, message}``).
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.detect.detector import Memo, detect, detection_to_json
from core.detect.lora_qwen_control import marked_detection
from core.detect.metadata import summarize_metadata
from core.detect.sidecars import find_preview, read_sidecar_info
from core.detect.types import Detection
from core.errors import LoadoutError
from core.files.model_file import MODEL_EXTENSIONS, TensorIndex, read_tensor_index
from core.merging.recipe import read_recipe
from core.quant.summary import summarize

#: Derived facts are added to ``metadata`` under this prefix, beside the file's own keys.
DERIVED = "loadout."

#: Detection memos by tensor structure (``TensorIndex.structure``): files of one structure (a
#: library's fine-tunes of one base, LoRAs of one trainer and rank) are classified from shapes once.
MEMO_CAPACITY = 64


@lru_cache(maxsize=MEMO_CAPACITY)
def _memo_of(structure: Hashable) -> Memo:
    """The memo of one structure (an empty one the first time). Two threads on one structure may
    both fill it: the values are equal."""
    return {}


def _memo_for(structure: Hashable | None) -> Memo | None:
    return None if structure is None else _memo_of(structure)


def clear_caches() -> None:
    """Forget remembered structures (headers and detection); results do not change, only speed."""
    from core.files import header_cache

    header_cache.clear()
    _memo_of.cache_clear()


@dataclass
class InspectResult:
    path: Path
    index: TensorIndex | None = None
    detection: Detection | None = None
    error: LoadoutError | None = None
    derived: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": str(self.path)}
        if self.detection is not None:
            out.update(detection_to_json(self.detection))
        else:
            out.update(
                {
                    "kind": "unknown",
                    "family": None,
                    "variant": None,
                    "layout": None,
                    "components": [],
                    "lora": None,
                }
            )
        out["format"] = self.index.format if self.index else None
        # Keep the contract's key order: path, kind, family, variant, format, layout, ...
        ordered = {k: out[k] for k in ("path", "kind", "family", "variant", "format", "layout")}
        ordered["components"] = out["components"]
        ordered["lora"] = out["lora"]
        meta: dict[str, Any] = dict(self.index.metadata) if self.index else {}
        meta.update({DERIVED + k: v for k, v in self.derived.items()})
        ordered["metadata"] = meta
        ordered["warnings"] = list(self.warnings)
        ordered["error"] = self.error.to_json() if self.error else None
        return ordered


def inspect_file(path: str | os.PathLike[str]) -> InspectResult:
    """Inspect one file. Bad input becomes ``result.error``, never an exception."""
    p = Path(path)
    result = InspectResult(p)
    try:
        index = read_tensor_index(p)
    except LoadoutError as exc:
        result.error = exc
        return result
    except (OSError, MemoryError, RecursionError, ValueError) as exc:  # last line of defence
        result.error = LoadoutError(
            f"{p.name} could not be read",
            why=f"{type(exc).__name__}: {exc}"[:300],
            fix="Check the file, or report it with this message",
            code="read_failed",
        )
        return result
    result.index = index
    str_meta = {k: v for k, v in index.metadata.items() if isinstance(v, str)}
    # a LoRA the engine takes as DiffSynth's Qwen-Image union control LoRA (by its file name) is said so
    det = marked_detection(detect(index.tensors, str_meta, p.name, memo=_memo_for(index.structure)), p)
    result.detection = det
    result.warnings = [*index.warnings, *det.warnings]
    result.derived = _derived(p, index, det)
    return result


def _derived(p: Path, index: TensorIndex, det: Detection) -> dict[str, Any]:
    derived: dict[str, Any] = {"file_size": index.file_size, "tensors": len(index.tensors)}
    str_meta = {k: v for k, v in index.metadata.items() if isinstance(v, str)}
    summary = summarize_metadata(str_meta)
    sidecar = read_sidecar_info(p)
    words = list(dict.fromkeys([*summary.trigger_words, *sidecar.trained_words]))
    if words:
        derived["trigger_words"] = words
    if summary.title:
        derived["title"] = summary.title
    preview = find_preview(p)
    if preview is not None:
        derived["preview"] = str(preview)
    if sidecar.base_model:
        derived["sidecar_base_model"] = sidecar.base_model
    for key in ("global_step", "wrapper", "gguf_version"):
        if key in index.extra:
            derived[key] = index.extra[key]
    if index.format == "gguf" or _stores_fp8(index):  # quantized storage, per component
        derived["quantization"] = {
            (c.prefix or c.role): summarize(index.tensors, c.prefix).to_json() for c in det.components
        } or {"": summarize(index.tensors).to_json()}
    recipe = read_recipe(str_meta)
    if recipe is not None:  # a Loadout merge: its recipe, parsed (the file holds it as JSON text)
        derived["merge_recipe"] = recipe
    if det.fields:
        derived["fields"] = {k: v for k, v in det.fields.items() if _jsonable(v)}
    return derived


def _stores_fp8(index: Any) -> bool:
    """fp8 weights (plain or with ComfyUI scales): their storage is worth reporting too."""
    return any(t.dtype.startswith("F8_") for t in index.tensors.values())


def _jsonable(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, type(None), list, tuple, dict))


def iter_model_files(root: Path) -> Iterator[Path]:
    """Model files under ``root`` (recursively, sorted, symlinked folders not followed twice)."""
    seen: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        try:
            st = os.stat(dirpath)
        except OSError:
            continue
        ident = (st.st_dev, st.st_ino)
        if ident in seen:
            dirnames[:] = []
            continue
        seen.add(ident)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.lower().endswith(MODEL_EXTENSIONS):
                yield Path(dirpath) / name


def expand_paths(paths: list[str]) -> list[Path]:
    """Files as given, directories walked recursively; missing paths kept (they report an error)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if p.is_dir():
            found = list(iter_model_files(p))
            # An empty folder is reported (as a folder, which read_tensor_index explains).
            out.extend(found or [p])
        else:
            out.append(p)
    return out
