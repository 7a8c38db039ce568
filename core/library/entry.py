"""One row of the model browser: a file found in a root, and what its header says once read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from core.detect.types import Component, LoraControl, LoraSummary, TrainedScale

Status = Literal["pending", "ok", "error"]

#: Metadata strings longer than this are left out of stored records (tag frequencies, embedded
#: thumbnails); their keys are listed under ``loadout.omitted``. Re-inspect the file for them.
METADATA_VALUE_CAP = 8192
OMITTED = "loadout.omitted"

#: What each folder hint expects to find, for the "is this file in the right folder" warning.
EXPECTED_KINDS: dict[str, tuple[str, ...]] = {
    "checkpoints": ("checkpoint",),
    "loras": ("lora",),
    "vae": ("vae",),
    "text_encoders": ("text_encoder",),
    "diffusion_models": ("diffusion_model", "checkpoint"),
    "controlnet": ("controlnet",),
    "upscale_models": ("upscale_model",),
    "embeddings": ("embedding",),
    "clip_vision": ("image_encoder",),
    "ipadapter": ("ip_adapter",),
    "style_models": ("style_model",),
}
#: The kind a pending file probably is, from its folder (used to group files before they are read).
HINT_KIND = {hint: kinds[0] for hint, kinds in EXPECTED_KINDS.items()}


@dataclass(frozen=True)
class Entry:
    """A model file in the library. ``pending`` until its header is read; then ``ok`` or ``error``.

    ``record`` is the ``loadout inspect --json`` record (long metadata strings left out, see
    :data:`METADATA_VALUE_CAP`); the other fields are the parts of it the browser shows.
    """

    path: Path
    origin: str
    root: Path
    folder: str  # relative to ``root``, "/"-separated, "" for the root itself
    kind_hint: str | None
    size: int
    mtime_ns: int
    status: Status = "pending"
    kind: str = "unknown"
    family: str | None = None
    variant: str | None = None
    format: str | None = None
    components: tuple[Component, ...] = ()
    lora: LoraSummary | None = field(default=None, hash=False)
    dtype: str | None = None
    params: int = 0
    title: str | None = None
    trigger_words: tuple[str, ...] = ()
    preview: Path | None = None
    warnings: tuple[str, ...] = ()
    error: str | None = None
    error_code: str | None = None
    record: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    file_id: tuple[int, int] | None = None  # (device, inode): hard links to one file share it
    sha256: str | None = None  # the whole file's, once hashed (see core.library.hashes)
    addnet: str | None = None  # a safetensors file's data hash (A1111's LoRA hash), when computed
    last_used: float | None = None  # when it was last loaded or used for a picture (epoch seconds)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def mtime(self) -> float:
        """Modification time in seconds since the epoch."""
        return self.mtime_ns / 1e9

    @property
    def group_kind(self) -> str:
        """The kind to group by: the header's verdict, or the folder's guess while pending."""
        if self.status == "pending" and self.kind_hint in HINT_KIND:
            return HINT_KIND[self.kind_hint]
        return self.kind

    @property
    def lora_text(self) -> str | None:
        """``"kohya lora+locon, rank 32, 192 modules"`` for a LoRA, else None."""
        if self.lora is None:
            return None
        rank = f", rank {self.lora.rank}" if self.lora.rank is not None else ""
        algos = "+".join(self.lora.algorithms) or "lora"
        return f"{self.lora.format} {algos}{rank}, {self.lora.modules} modules"

    def with_record(self, record: Mapping[str, Any], preview: Path | None) -> Entry:
        """This entry filled in from an inspect record. Raises KeyError/TypeError/ValueError for a
        record of the wrong shape (a damaged cache), so the caller can read the file again."""
        meta = record.get("metadata") or {}
        if not isinstance(meta, Mapping):
            raise TypeError("metadata is not an object")
        components = tuple(_component(c) for c in record["components"])
        error = record.get("error")
        warnings = [str(w) for w in record["warnings"]]
        kind = str(record["kind"])
        misplaced = _placement_warning(self.kind_hint, kind, components)
        if misplaced and error is None:
            warnings.append(misplaced)
        biggest = max(components, key=lambda c: c.bytes, default=None)
        return replace(
            self,
            status="error" if error else "ok",
            kind=kind,
            family=_opt_str(record["family"]),
            variant=_opt_str(record["variant"]),
            format=_opt_str(record["format"]),
            components=components,
            lora=_lora(record["lora"]),
            dtype=biggest.dtype if biggest is not None else None,
            params=sum(c.params for c in components),
            title=_opt_str(meta.get("loadout.title")),
            trigger_words=tuple(str(w) for w in meta.get("loadout.trigger_words") or ()),
            preview=preview,
            warnings=tuple(warnings),
            error=str(error["message"]) if error else None,
            error_code=str(error["code"]) if error else None,
            record=_with_path(record, self.path, preview),
        )

    def with_error(self, message: str, code: str) -> Entry:
        return replace(self, status="error", error=message, error_code=code)


def _opt_str(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value


def _component(c: Mapping[str, Any]) -> Component:
    return Component(
        role=c["role"],
        family=str(c["family"]),
        prefix=str(c["prefix"]),
        tensors=int(c["tensors"]),
        params=int(c["params"]),
        bytes=int(c["bytes"]),
        dtype=str(c["dtype"]),
    )


def _lora(value: Any) -> LoraSummary | None:
    if value is None:
        return None
    return LoraSummary(
        format=str(value["format"]),
        algorithms=tuple(str(a) for a in value["algorithms"]),
        rank=None if value["rank"] is None else int(value["rank"]),
        modules=int(value["modules"]),
        targets={str(k): int(v) for k, v in value["targets"].items()},
        trained_scale=tuple(TrainedScale.from_json(t) for t in value.get("trained_scale") or ()),
        control=_control(value.get("control")),
    )


def _control(value: Any) -> LoraControl | None:
    return "input" if value == "input" else "reference" if value == "reference" else None


def _placement_warning(hint: str | None, kind: str, components: tuple[Component, ...]) -> str | None:
    expected = EXPECTED_KINDS.get(hint or "")
    if expected is None or kind == "unknown" or kind in expected:
        return None
    kind_text = kind.replace("_", " ")
    if hint == "checkpoints" and kind == "diffusion_model":
        return (
            "a diffusion model alone (no VAE or text encoders) in a checkpoints folder: ComfyUI's "
            "checkpoint loader cannot load it; it belongs in diffusion_models"
        )
    return f"a {kind_text} in a {hint} folder: loaders of that folder will not accept it"


def _with_path(record: Mapping[str, Any], path: Path, preview: Path | None) -> dict[str, Any]:
    """The record as seen through ``path`` (a cached record may have been read through another
    path to the same file), with the preview found now."""
    out = dict(record)
    out["path"] = str(path)
    meta = dict(out.get("metadata") or {})
    meta.pop("loadout.preview", None)
    if preview is not None:
        meta["loadout.preview"] = str(preview)
    out["metadata"] = meta
    return out


def trim_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with long metadata strings left out (named in ``loadout.omitted``)."""
    out = dict(record)
    meta = dict(out.get("metadata") or {})
    omitted = sorted(k for k, v in meta.items() if isinstance(v, str) and len(v) > METADATA_VALUE_CAP)
    for key in omitted:
        del meta[key]
    if omitted:
        meta[OMITTED] = omitted
    out["metadata"] = meta
    return out
