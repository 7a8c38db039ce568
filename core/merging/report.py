"""The merge's dry run: what it would merge, at which ratios, into what, and what it would refuse,
read from the headers alone (no tensor data, nothing written)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from core.errors import LoadoutError
from core.files.destination import check_output_file
from core.files.writer import refuse_same_file
from core.merging.merge import DIFFUSION, MergePlan, plan_merge
from core.merging.recipe import MergeRecipe


def _blocks(plan: MergePlan) -> list[dict[str, Any]]:
    """Each ratio given per block with the number of diffusion-model keys that take it."""
    keys = plan.models[0].parts[DIFFUSION]
    out = []
    for prefix, ratio in plan.recipe.blocks:
        taken = sum(1 for k in keys if plan.recipe.ratio_of(k) == ratio and k.startswith(prefix))
        out.append({"prefix": prefix, "ratio": ratio, "keys": taken})
    return out


def dry_run(
    paths: Sequence[str | os.PathLike[str]],
    recipe: MergeRecipe,
    out: str | os.PathLike[str] | None = None,
    dtype: torch.dtype | None = None,
) -> dict[str, Any]:
    """``{"models", "recipe", "blocks", "keys", "output", "refused"}``; ``refused`` is null or the
    ``{"code", "message"}`` the merge would stop with."""
    report: dict[str, Any] = {"models": [], "recipe": recipe.to_json(), "blocks": [], "keys": None}
    if out is not None:
        report["output"] = {"path": str(out), "refused": None}
        try:
            check_output_file(out)
            refuse_same_file(Path(out), *(Path(p) for p in paths))
        except LoadoutError as exc:
            report["output"]["refused"] = exc.to_json()
    try:
        plan = plan_merge(paths, recipe, dtype)
    except LoadoutError as exc:
        report["refused"] = exc.to_json()
        return report
    report["models"] = [
        {"name": m.name, "path": str(m.path), "kind": m.detection.kind, "family": m.family}
        for m in plan.models
    ]
    report["blocks"] = _blocks(plan)
    merged = sum(p.merged for p in plan.keys)
    report["keys"] = {"merged": merged, "copied": len(plan.keys) - merged}
    report["refused"] = None
    return report


def refusals(report: dict[str, Any]) -> list[dict[str, str]]:
    """The refusals of a :func:`dry_run` report: the output's, then the models'."""
    found = [report.get("output", {}).get("refused"), report.get("refused")]
    return [r for r in found if r is not None]
