"""``loadout merge A B [C] --method ...``: merge two or three models of one family into a new file.

The plan is made from headers alone (:func:`plan_merge`: refusals, which keys merge at which
ratio); the merge then streams every tensor of model A's file into the output -- merged where the
recipe says, A's own elsewhere (its VAE, its text encoders unless they are merged, any other
tensor) -- through the one atomic writer, with the recipe in the file's metadata.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.archs.catalog import blocks_for
from core.errors import LoadoutError
from core.files.destination import check_output_file
from core.files.dtypes import DTYPES as DTYPE_INFO
from core.files.leases import open_input
from core.files.writer import WriteProgress, refuse_same_file, write_safetensors
from core.loading.convert_file import cast_tensor
from core.memory.manager import MemoryManager
from core.merging.inputs import NAMES, TEXT_KEPT, MergeInput, check_same_model, open_model
from core.merging.recipe import RECIPE_KEY, MergeRecipe
from core.merging.stream import KeyPlan, MergedTensors, Source
from core.merging.workspace import bytes_per_element, workspace
from core.version import engine_version

DIFFUSION = "diffusion_model"
#: a file's SHA-256 in hex (``core.library.hashes.HashStore`` answers it from its cache)
Sha256 = Callable[[Path, Callable[[], None] | None], str]


@dataclass(frozen=True)
class MergePlan:
    recipe: MergeRecipe
    models: tuple[MergeInput, ...]
    keys: tuple[KeyPlan, ...]
    dtypes: dict[str, torch.dtype]  # output dtype per key

    @property
    def family(self) -> str:
        return self.models[0].family


@dataclass(frozen=True)
class MergeResult:
    path: Path
    device: str  # where the arithmetic ran
    chunk_bytes: int  # working memory of one slice
    merged: int  # keys merged
    copied: int  # keys of A written unmerged
    slices: int  # slices computed (more than ``merged`` when tensors were split to fit)


def _refuse_count(recipe: MergeRecipe, paths: Sequence[object]) -> None:
    if len(paths) != recipe.method.inputs:
        raise LoadoutError(
            f"{recipe.method.value} merges {recipe.method.inputs} models, and {len(paths)} were given",
            why="weighted, subtract and add take models A and B; add-difference takes A, B and C "
            "(A + (B - C))",
            fix=f"Name {recipe.method.inputs} model files",
            code="bad_argument",
        )


def _check_blocks(recipe: MergeRecipe, a: MergeInput) -> None:
    keys = a.parts[DIFFUSION]
    for prefix, _ in recipe.blocks:
        if not any(k.startswith(prefix) for k in keys):
            table = blocks_for(a.family)
            names = [p for p in table.prefixes if any(k.startswith(p) for k in keys)] if table else []
            listed = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
            raise LoadoutError(
                f"no key of model A's diffusion model starts with {prefix!r}",
                why="a block is named by the start of its keys, as ComfyUI's ModelMergeBlocks names "
                "them" + (f" ({table.node or table.title}: {listed})" if table else ""),
                fix="Name blocks that the model has (e.g. input_blocks.4., middle_block., double_blocks.7.)",
                code="bad_argument",
            )


def _out_dtype(a: MergeInput, key: str, dtype: torch.dtype | None) -> torch.dtype:
    info = a.info(key)
    stored = DTYPE_INFO[info.dtype].torch_dtype
    assert stored is not None
    probe = torch.empty(info.shape if info.shape else (), dtype=stored, device="meta")
    return cast_tensor(probe, dtype).dtype


def _key_plans(recipe: MergeRecipe, models: Sequence[MergeInput]) -> list[KeyPlan]:
    a = models[0]
    where: dict[str, tuple[str, str]] = {}  # A's key -> (part, key inside the part)
    for part, keys in a.parts.items():
        if part == DIFFUSION or recipe.text_encoders is not None:
            where.update({full: (part, inner) for inner, full in keys.items()})
    plans = []
    for key, info in a.index.tensors.items():
        found = where.get(key)
        stored = DTYPE_INFO.get(info.dtype)
        if found is None or stored is None or not stored.is_float or found[1].endswith(TEXT_KEPT):
            plans.append(KeyPlan(key, (key,)))
            continue
        part, inner = found
        ratio = recipe.ratio_of(inner) if part == DIFFUSION else recipe.text_encoders
        assert ratio is not None
        plans.append(KeyPlan(key, tuple(m.parts[part][inner] for m in models), ratio))
    return plans


def plan_merge(
    paths: Sequence[str | os.PathLike[str]], recipe: MergeRecipe, dtype: torch.dtype | None = None
) -> MergePlan:
    """Everything the merge will do, and every refusal, from the models' headers alone."""
    _refuse_count(recipe, paths)
    models = tuple(open_model(name, p) for name, p in zip(NAMES, paths, strict=False))
    parts = [DIFFUSION]
    if recipe.text_encoders is not None:
        parts += [p for p in models[0].parts if p != DIFFUSION]
        if len(parts) == 1:
            raise LoadoutError(
                f"model A, {models[0].path.name}, has no text encoders to merge",
                why="it is a diffusion model alone",
                fix="Merge the diffusion models only, or make a checkpoint model A",
                code="bad_argument",
            )
    check_same_model(models, parts)
    _check_blocks(recipe, models[0])
    keys = tuple(_key_plans(recipe, models))
    dtypes = {p.key: _out_dtype(models[0], p.key, dtype) for p in keys}
    return MergePlan(recipe, models, keys, dtypes)


def _largest_need(plan: MergePlan) -> int:
    """The working memory of the largest merged tensor, whole."""
    need = 0
    for p in plan.keys:
        if p.merged:
            infos = [m.info(k) for m, k in zip(plan.models, p.sources, strict=True)]
            sizes = [i.nbytes // max(1, i.numel) for i in infos]
            per = bytes_per_element(sizes, plan.dtypes[p.key].itemsize, len(infos) == 3)
            need = max(need, per * infos[0].numel)
    return need


def file_sha256(path: Path, check: Callable[[], None] | None = None) -> str:
    """The file's SHA-256, read in 4 MiB pieces (``check`` between them)."""
    digest = hashlib.sha256()
    with open_input(path) as fh:
        while piece := fh.read(4 << 20):
            digest.update(piece)
            if check is not None:
                check()
    return digest.hexdigest()


def _record(
    plan: MergePlan, sha256: Sha256, dtype: torch.dtype | None, check: Callable[[], None] | None
) -> str:
    inputs = [
        {"model": m.name, "file": m.path.name, "sha256": sha256(m.path, check)[:12], "family": m.family}
        for m in plan.models
    ]
    record: dict[str, Any] = plan.recipe.to_json()
    record.update(
        inputs=inputs,
        dtype=str(dtype).removeprefix("torch.") if dtype is not None else None,
        loadout=engine_version(),
    )
    return json.dumps(record)


def merge_models(
    paths: Sequence[str | os.PathLike[str]],
    recipe: MergeRecipe,
    out: str | os.PathLike[str],
    *,
    dtype: torch.dtype | None = None,
    manager: MemoryManager | None = None,
    sha256: Sha256 | None = None,
    progress: Callable[[WriteProgress], None] | None = None,
    check: Callable[[], None] | None = None,
) -> MergeResult:
    """Merge the models at ``paths`` (A, B[, C]) by ``recipe`` into ``out`` (safetensors, atomic).
    ``dtype``: the output's floating-point dtype (default: A's, tensor by tensor). ``manager``:
    compute on its device, in slices that fit its free memory (default: the CPU). ``sha256``: the
    inputs' digests for the recipe (the library's cache where there is one; default: read now)."""
    check_output_file(out)  # as given: "newdir/" names a folder
    out_path = Path(out)
    refuse_same_file(out_path, *(Path(p) for p in paths))
    plan = plan_merge(paths, recipe, dtype)
    space = workspace(manager, _largest_need(plan))
    meta = {k: v for k, v in plan.models[0].index.metadata.items() if isinstance(v, str)}
    meta[RECIPE_KEY] = _record(plan, sha256 or file_sha256, dtype, check)
    sources = [Source(m.index) for m in plan.models]
    tensors = MergedTensors(recipe.method, plan.keys, sources, plan.dtypes, space, check)
    specs = {p.key: (plan.dtypes[p.key], plan.models[0].info(p.key).shape) for p in plan.keys}
    try:
        path = write_safetensors(out_path, tensors, meta, progress=progress, check=check, specs=specs)
    finally:
        tensors.release()
        for s in sources:
            s.close()
    merged = sum(p.merged for p in plan.keys)
    return MergeResult(path, space.device, space.chunk_bytes, merged, len(plan.keys) - merged, tensors.slices)
