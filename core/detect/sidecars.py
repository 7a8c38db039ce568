"""Files artists already keep beside their models: preview images and Civitai info.

- previews: ``<stem>.preview.png|jpg|jpeg|webp``, then ``<stem>.png|jpg|jpeg|webp``;
- ``<stem>.civitai.info``: the Civitai model-version JSON saved by Civitai Helper
  (``trainedWords``, ``baseModel``, ``name``, ``description``, ``model: {name, type, nsfw}``);
- ``<stem>.cm-info.json``: Stability Matrix's connected-model info (``TrainedWords``, ``BaseModel``,
  ``ModelName``, ``VersionName``, ``ModelDescription``, ...).

Sidecars are other programs' files: a broken, huge or unreadable one gives a warning, never an
exception, and files over ``SIDECAR_CAP`` bytes are not read at all.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.detect.metadata import Hint, family_match
from core.files.leases import read_input

SIDECAR_CAP = 4 * 1024 * 1024
PREVIEW_SUFFIXES = (
    ".preview.png",
    ".preview.jpg",
    ".preview.jpeg",
    ".preview.webp",
    ".png",
    ".jpg",
    ".jpeg",
    ".webp",
)
_TAG = re.compile(r"<[^>]+>")


@dataclass(frozen=True)
class SidecarInfo:
    trained_words: tuple[str, ...] = ()
    base_model: str | None = None  # as the site spells it: "SDXL 1.0", "Flux.1 D", "Pony"
    model_name: str | None = None
    version_name: str | None = None
    description: str | None = None  # plain text (HTML tags removed)
    model_type: str | None = None  # "LORA", "Checkpoint", "LoCon", ...
    nsfw: bool | None = None
    model_id: int | None = None  # Civitai ids
    version_id: int | None = None
    hints: tuple[Hint, ...] = ()
    sources: tuple[Path, ...] = ()  # the sidecar files that were read
    warnings: tuple[str, ...] = ()


def find_preview(model_path: Path, siblings: Collection[str] | None = None) -> Path | None:
    """The preview image beside ``model_path``, or None.

    ``siblings`` (the names in the model's folder, from a directory scan the caller already made)
    avoids one ``stat`` per candidate and matches extensions case-insensitively.
    """
    stem = model_path.stem
    if siblings is not None:
        by_lower = {name.lower(): name for name in siblings}
        for suffix in PREVIEW_SUFFIXES:
            found = by_lower.get((stem + suffix).lower())
            if found is not None:
                return model_path.with_name(found)
        return None
    for suffix in PREVIEW_SUFFIXES:
        candidate = model_path.with_name(stem + suffix)
        try:
            if candidate.is_file():
                return candidate
        except OSError:
            continue
    return None


def _load(path: Path, warnings: list[str]) -> Mapping[str, Any] | None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    except OSError as exc:
        warnings.append(f"{path.name} cannot be read ({exc.strerror or exc}); skipped")
        return None
    if size > SIDECAR_CAP:
        warnings.append(f"{path.name} is {size:,} bytes, over the {SIDECAR_CAP:,}-byte limit; skipped")
        return None
    try:
        text = read_input(path).decode("utf-8-sig")
        data = json.loads(text)
    except OSError as exc:
        warnings.append(f"{path.name} cannot be read ({exc.strerror or exc}); skipped")
        return None
    except UnicodeDecodeError:
        warnings.append(f"{path.name} is not UTF-8 text; skipped")
        return None
    except (json.JSONDecodeError, RecursionError) as exc:
        warnings.append(f"{path.name} is not valid JSON ({exc}); skipped")
        return None
    if not isinstance(data, dict):
        warnings.append(f"{path.name} holds a JSON {type(data).__name__}, not an object; skipped")
        return None
    return data


def _str(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _plain(value: Any) -> str | None:
    text = _str(value)
    if text is None:
        return None
    text = html.unescape(_TAG.sub(" ", text))
    return re.sub(r"[ \t]+", " ", text).strip() or None


def _words(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return [w.strip() for w in value if isinstance(w, str) and w.strip()]


def _civitai(data: Mapping[str, Any]) -> dict[str, Any]:
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    assert isinstance(model, dict)
    return {
        "trained_words": _words(data.get("trainedWords")),
        "base_model": _str(data.get("baseModel")),
        "model_name": _str(model.get("name")),
        "version_name": _str(data.get("name")),
        "description": _plain(data.get("description")) or _plain(model.get("description")),
        "model_type": _str(model.get("type")),
        "nsfw": model.get("nsfw") if isinstance(model.get("nsfw"), bool) else None,
        "model_id": _int(data.get("modelId")),
        "version_id": _int(data.get("id")),
    }


def _cm_info(data: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "trained_words": _words(data.get("TrainedWords")),
        "base_model": _str(data.get("BaseModel")),
        "model_name": _str(data.get("ModelName")),
        "version_name": _str(data.get("VersionName")),
        "description": _plain(data.get("VersionDescription")) or _plain(data.get("ModelDescription")),
        "model_type": _str(data.get("ModelType")),
        "nsfw": data.get("Nsfw") if isinstance(data.get("Nsfw"), bool) else None,
        "model_id": _int(data.get("ModelId")),
        "version_id": _int(data.get("VersionId")),
    }


def read_sidecar_info(model_path: Path) -> SidecarInfo:
    """What ``<stem>.civitai.info`` and ``<stem>.cm-info.json`` say; the first one read wins a field."""
    warnings: list[str] = []
    merged: dict[str, Any] = {}
    words: list[str] = []
    hints: list[Hint] = []
    sources: list[Path] = []
    for suffix, parse in ((".civitai.info", _civitai), (".cm-info.json", _cm_info)):
        path = model_path.with_name(model_path.stem + suffix)
        data = _load(path, warnings)
        if data is None:
            continue
        sources.append(path)
        fields = parse(data)
        words.extend(fields.pop("trained_words"))
        for key, value in fields.items():
            if merged.get(key) is None and value is not None:
                merged[key] = value
        base = fields["base_model"]
        family, exact = family_match(base) if base else (None, True)
        if family is not None:
            said = f"{path.name} says the base model is {base!r}"
            hints.append(Hint(family, suffix.lstrip("."), said, exact=exact))
    unique: list[str] = []
    for w in words:
        if w.lower() not in {u.lower() for u in unique}:
            unique.append(w)
    return SidecarInfo(
        trained_words=tuple(unique),
        hints=tuple(hints),
        sources=tuple(sources),
        warnings=tuple(warnings),
        **merged,
    )
