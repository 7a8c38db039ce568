"""Preprocessor models through a :class:`~core.session.placement.Placement`: loaded once per file
(zero-copy, :mod:`core.loading.preprocessor`), placed by the memory manager for the "preprocess"
phase (before the diffusion model's; whole, partly or streamed; its events name the model
"<file> preprocessor") with room for one run's activations, and run on the manager's device; the
model a preprocessor needs is the file given for its family, else the first of that family in the
library."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from core.errors import ModelMismatchError
from core.library.index import LibraryIndex
from core.loading.loader import LoadOptions, _wrong_kind, inspect_for_loading
from core.loading.preprocessor import LoadedPreprocessor, load_preprocessor
from core.memory.manager import NotEnoughMemoryError
from core.preprocess.onnx_models import (
    OnnxFile,
    OnnxModel,
    account,
    forget,
    load_onnx,
    onnx_entries,
    recognise,
)
from core.preprocess.registry import MissingPreprocessorModelError, ModelRun, Preprocessor, missing_model
from core.session.placement import Placement

ROLE = "preprocessor_model"


@dataclass
class PreprocessorModels:
    """The preprocessor models loaded in a session, by resolved path."""

    loaded: dict[Path, LoadedPreprocessor] = field(default_factory=dict)
    #: the ONNX sessions (dwpose's), by resolved path
    sessions: dict[Path, OnnxModel] = field(default_factory=dict)

    def get(self, path: Path, check: Callable[[], None] | None = None) -> LoadedPreprocessor:
        key = Path(path).resolve()
        found = self.loaded.get(key)
        if found is None:
            found = self.loaded[key] = load_preprocessor(key, LoadOptions(check=check))
        return found

    def session(self, path: Path, family: str) -> OnnxModel:
        key = Path(path).resolve()
        found = self.sessions.get(key)
        if found is None or found.family != family:
            found = self.sessions[key] = load_onnx(key, family)
        return found

    def paths(self) -> list[Path]:
        """Every file held: the torch models' and the ONNX sessions'."""
        return [*self.loaded, *self.sessions]

    def keep_only(self, paths: Iterable[Path]) -> list[LoadedPreprocessor | OnnxModel]:
        """Forget the ones not in ``paths``; returns them (for :func:`let_go`)."""
        keep = {Path(p).resolve() for p in paths}
        gone: list[LoadedPreprocessor | OnnxModel] = [v for k, v in self.loaded.items() if k not in keep]
        gone += [v for k, v in self.sessions.items() if k not in keep]
        self.loaded = {k: v for k, v in self.loaded.items() if k in keep}
        self.sessions = {k: v for k, v in self.sessions.items() if k in keep}
        return gone


def let_go(placement: Placement, model: LoadedPreprocessor | OnnxModel) -> None:
    """The placement drops a model :meth:`PreprocessorModels.keep_only` let go."""
    if isinstance(model, OnnxModel):
        forget(placement, model)
    else:
        placement.release(model.module)


def model_files(
    records: Iterable[Preprocessor], given: Iterable[Path], library: Iterable[tuple[Path, str, str | None]]
) -> dict[str, Path]:
    """Family -> the model file for each model a preprocessor in ``records`` needs: a ``given`` file of its
    family (each given file must be a preprocessor model), else the first library entry
    ``(path, kind, family)`` of its family by name, a safetensors file before a pickle (which
    loading refuses in words); none: refused in words."""
    out: dict[str, Path] = {}
    for path in given:
        if Path(path).suffix.lower() == ".onnx":
            out.setdefault(recognise(Path(path)), Path(path))
            continue
        _index, det = inspect_for_loading(path)
        if det.kind != ROLE:
            raise _wrong_kind(Path(path).name, det, ROLE)
        out.setdefault(det.family or "", Path(path))
    entries = list(library)
    for record in records:
        for need in record.onnx_files:
            if need.family not in out:
                out[need.family] = _first(entries, need.family) or _refuse_missing(record, need)
        if record.onnx_files:
            continue
        for family in record.model_families:
            if family in out:
                continue
            mine = (p for p, kind, fam in entries if kind == ROLE and fam == family)
            # a safetensors file first (pickles are refused)
            found = sorted(mine, key=lambda p: (p.suffix.lower() != ".safetensors", p.name))
            if not found:
                raise missing_model(record, family)
            out[family] = found[0]
    return out


def library_models(
    index: LibraryIndex | None, records: Iterable[Preprocessor]
) -> list[tuple[Path, str, str | None]]:
    """The library's ``(path, kind, family)`` for ``records`` (none when no record needs a model):
    its entries, and for a record that runs ONNX graphs the ONNX files under its folders (which the
    index does not list)."""
    wanted = [r for r in records if r.model_family is not None]
    if index is None or not wanted:
        return []
    out: list[tuple[Path, str, str | None]] = [(e.path, e.kind, e.family) for e in index.entries()]
    if any(r.onnx_files for r in wanted):
        out += onnx_entries(root.path for root in index.roots)
    return out


def _first(entries: list[tuple[Path, str, str | None]], family: str) -> Path | None:
    return min(
        (p for p, kind, fam in entries if kind == ROLE and fam == family), key=lambda p: p.name, default=None
    )


def _refuse_missing(record: Preprocessor, need: OnnxFile) -> Path:
    raise MissingPreprocessorModelError(
        f"the {record.name} preprocessor needs {need.file} ({need.title}), and none was given or found",
        why=f"it runs two ONNX graphs: {' and '.join(f.file for f in record.onnx_files)}",
        fix=f"Download {need.source}; give that file, or put it in a folder of the library",
    )


def place_preprocessor(placement: Placement, model: LoadedPreprocessor, rows: int, cols: int) -> torch.device:
    """Ask the manager for ``model`` with room for a run at ``rows`` x ``cols`` pixels (the size
    the network sees); the device to compute on (the CPU when nothing is placed)."""
    return place_preprocessors(placement, [(model, rows, cols)])


def place_preprocessors(
    placement: Placement, runs: Sequence[tuple[LoadedPreprocessor, int, int]]
) -> torch.device:
    """Ask the manager for the models of ``runs`` together, with room for the largest of their
    runs (each at its rows x cols: they run one after another); the device to compute on."""
    if not placement.active:
        return torch.device("cpu")
    for model, _rows, _cols in runs:
        if placement.manager.find(model.module) is None:
            placement.register(model.module, model.name)
    fixed = placement.manager.settings.headroom_fixed
    need = 0 if fixed else max(m.net.activation_bytes(m.config, r, c) for m, r, c in runs)
    result = placement.place([m.module for m, _r, _c in runs], need)
    if result.refused:
        names = " and ".join(m.name for m, _r, _c in runs)
        raise NotEnoughMemoryError(
            f"not enough memory on {placement.describe().label} to run {names}",
            why=result.refused[0],
            fix="Use a smaller picture or model, or free memory: offload or unload other models",
        )
    return torch.device(placement.manager.device)


def _sessions(
    record: Preprocessor, placement: Placement, models: PreprocessorModels, files: Mapping[str, Path]
) -> dict[str, OnnxModel]:
    out = {}
    for need in record.onnx_files:
        path = files.get(need.family)
        if path is None:
            _refuse_missing(record, need)
        else:
            out[need.family] = models.session(path, need.family)
            account(placement, out[need.family])
    return out


def _loaded(
    record: Preprocessor, family: str, models: PreprocessorModels, files: Mapping[str, Path],
    check: Callable[[], None],
) -> LoadedPreprocessor:  # fmt: skip
    path = files.get(family)
    if path is None:
        raise missing_model(record, family)
    model = models.get(path, check)
    if model.family != family:
        title = next((m.title for m in record.more_models if m.family == family), record.model_title)
        raise ModelMismatchError(
            f"{model.path.name} is a {model.family} model, and the {record.name} preprocessor takes {title}",
            fix=f"Give {title} file",
            code="wrong_model",
        )
    return model


def model_run(
    placement: Placement, models: PreprocessorModels, files: Mapping[str, Path],
    check: Callable[[], None] = lambda: None,
) -> ModelRun:  # fmt: skip
    """The runner :func:`core.preprocess.preprocess` calls for a model preprocessor: its models are
    ``files[family]`` for each family it needs (missing: refused in words), loaded once, placed
    together, run."""

    def run(record: Preprocessor, picture: np.ndarray, settings: Mapping[str, float]) -> np.ndarray:
        if record.onnx_hint is not None:
            return record.onnx_hint(_sessions(record, placement, models, files), picture, settings, check)
        loaded = [_loaded(record, family, models, files, check) for family in record.model_families]
        assert record.model_hint is not None and record.model_input is not None and loaded
        rows, cols = record.model_input(picture.shape[0], picture.shape[1], settings)
        sizes = [(rows, cols), *(m.input_size for m in record.more_models)]
        device = place_preprocessors(placement, [(m, r, c) for m, (r, c) in zip(loaded, sizes, strict=True)])
        if not record.more_models:
            return record.model_hint(loaded[0].module, picture, settings, device, check)
        networks = nn.ModuleDict({m.family: m.module for m in loaded})
        return record.model_hint(networks, picture, settings, device, check)

    return run
