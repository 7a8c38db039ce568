"""A queued job: a generate request, the files it names by SHA-256 (the path only a hint), and
its place in a grid. Frozen and plain, so it crosses threads, processes and the queue file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.generate.hashes import FileHashes
from core.generate.naming import file_paths
from core.generate.request import GenerateRequest
from core.queue.codec import from_jsonable, to_jsonable


@dataclass(frozen=True)
class FileRef:
    """A model file as a worker finds it: by content (``sha256``, ``size``); ``path`` is a hint."""

    path: Path
    sha256: str
    size: int


#: What a worker must hold to run a job without loading anything: the model files' hashes and
#: the LoRA stack's (strengths change live, so they are not part of it).
Key = tuple[tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True)
class Job:
    request: GenerateRequest  # its output is the final picture's path (batch: -2, -3 beside it)
    files: tuple[FileRef, ...] = ()  # every model and LoRA file of the request
    lora_strengths: tuple[float, float] | None = None  # the first LoRA's (model, clip), set live
    grid: str = ""  # the grid this cell belongs to ("" for a plain job)
    x: int = 0
    y: int = 0
    z: int = 0
    labels: tuple[str, str, str] = ("", "", "")
    grid_file: Path | None = None  # where this cell's Z grid is drawn when its cells are done

    def key(self) -> Key:
        by_path = {f.path: f.sha256 for f in self.files}
        models = tuple(by_path.get(p, str(p)) for p in self.request.models.paths)
        loras = tuple(by_path.get(a.path, str(a.path)) for a in self.request.loras)
        return models, loras

    def outputs(self) -> list[Path]:
        return file_paths(self.request.output, self.request.image.batch)

    def with_paths(self, where: dict[str, Path]) -> GenerateRequest:
        """The request with each file replaced by ``where[sha256]`` (a worker's own copy)."""
        by_path = {f.path: where.get(f.sha256, f.path) for f in self.files}
        m = self.request.models

        def at(p: Path | None) -> Path | None:
            return by_path.get(p, p) if p is not None else None

        models = replace(
            m, checkpoint=at(m.checkpoint), diffusion_model=at(m.diffusion_model),
            text_encoders=tuple(by_path.get(p, p) for p in m.text_encoders), vae=at(m.vae),
        )  # fmt: skip
        loras = tuple(replace(a, path=by_path.get(a.path, a.path)) for a in self.request.loras)
        return replace(self.request, models=models, loras=loras)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = to_jsonable(self)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        return from_jsonable(cls, data)


def with_hashes(
    request: GenerateRequest, hashes: FileHashes, check: Callable[[], None] | None = None, **cell: Any
) -> Job:
    """A job for ``request`` naming each of its files by SHA-256 (hashed once per file version)."""
    paths = dict.fromkeys([*request.models.paths, *(a.path for a in request.loras)])
    refs = tuple(FileRef(p, hashes.sha256(p, check), p.stat().st_size) for p in paths)
    return Job(request, refs, **cell)
