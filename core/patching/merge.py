"""``loadout merge``: bake a stack of LoRAs into a copy of a model.

The dry run reports, per LoRA, how its modules map onto the base, and whatever the merge would
refuse (the base's kind or parts, a LoRA for another family, non-finite factors), from the base's
header and the LoRAs' factors: the base's weights are not read. The real merge loads the base
memory-mapped, applies the stack, and writes a copy in the base's key layout (atomic; inputs are
never modified), recording what was merged in the metadata.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from core.errors import LoadoutError
from core.files.destination import check_output_file
from core.files.model_file import read_tensor_index
from core.files.writer import refuse_same_file
from core.loading.loader import (
    LoadOptions,
    ModelBundle,
    check_loadable,
    inspect_for_loading,
    load_checkpoint,
    load_diffusion_model,
)
from core.loading.save import save_checkpoint
from core.patching.block_weights import BlockWeights
from core.patching.keymap import match_lora_headers
from core.patching.keymap_headers import lora_analysis
from core.patching.lora_stack import LoraStack, read_patches, refuse_other_family
from core.values import LORA_STRENGTH


@dataclass(frozen=True)
class LoraArg:
    path: Path
    model: float = 1.0
    clip: float | None = None  # None: same as model
    block_weights: BlockWeights | None = None  # LoRA block weights (None: one strength everywhere)
    on: str | None = None  # the prompt it acts on only (core.patching.prompt_target)

    def __post_init__(self) -> None:
        LORA_STRENGTH.check(self.model)
        if self.clip is not None:
            LORA_STRENGTH.check(self.clip)


def _lora_entry(arg: LoraArg, base_path: Path, force: bool) -> tuple[dict[str, Any], str | None]:
    """One LoRA's line of the report, and the base's family."""
    report, family, lora_family = match_lora_headers(arg.path, base_path)
    analysis = lora_analysis(arg.path)
    skipped: list[str] = []
    lora_refused = None
    try:  # what the merge refuses: a LoRA for another family, non-finite factors, an unreadable format
        refuse_other_family(arg.path, analysis, family, force)
        read_patches(arg.path, read_tensor_index(arg.path).format, analysis, report, skipped)
    except LoadoutError as exc:
        lora_refused = exc.to_json()
    entry = {
        "path": str(arg.path),
        "format": analysis.summary.format,
        "base_family": lora_family,
        "modules": analysis.summary.modules,
        "matched": len(report.matched),
        "unmatched": list(report.unmatched),
        "shape_mismatches": list(report.shape_mismatches),
        "skipped": skipped,
        "refused": lora_refused,
    }
    return entry, family


def dry_run(
    base: str | os.PathLike[str],
    loras: Sequence[LoraArg],
    *,
    force: bool = False,
    out: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """The match report of DESIGN.md, and what the merge would refuse, writing nothing: the base's
    header (planned as the merge loads it) and the LoRAs' matched factors are read, not the base's
    weights. ``refused`` (a code and a message, or None) on the base, on each LoRA and, when ``out``
    is given, on the output."""
    base_path = Path(base)
    report: dict[str, Any] = {}
    if out is not None:
        report["output"] = {"path": str(out), "refused": None}
        try:
            check_output_file(out)
            refuse_same_file(Path(out), base_path, *(a.path for a in loras))
        except LoadoutError as exc:
            report["output"]["refused"] = exc.to_json()
    family: str | None = None
    out_loras = []
    for arg in loras:
        entry, family = _lora_entry(arg, base_path, force)
        out_loras.append(entry)
    det = inspect_for_loading(base_path)[1]
    if family is None:
        family = det.family
    base_refused = None
    try:
        check_loadable(base_path, as_checkpoint=det.kind != "diffusion_model")
    except LoadoutError as exc:
        base_refused = exc.to_json()
    report["base"] = {"path": str(base_path), "family": family, "refused": base_refused}
    report["loras"] = out_loras
    return report


def refused(report: dict[str, Any]) -> list[dict[str, str]]:
    """The refusals in a :func:`dry_run` report: the output's, the base's, then the LoRAs'."""
    output = report.get("output", {}).get("refused")
    found = [output, report["base"]["refused"], *(lo["refused"] for lo in report["loras"])]
    return [r for r in found if r is not None]


def _load_base(path: Path) -> ModelBundle:
    index, det = inspect_for_loading(path)
    if det.kind == "checkpoint":
        return load_checkpoint(path, LoadOptions())
    if det.kind == "diffusion_model":
        comp = load_diffusion_model(path)
        meta = {k: v for k, v in index.metadata.items() if isinstance(v, str)}
        return ModelBundle(path, det, meta, diffusion_model=comp)
    return load_checkpoint(path)  # raises the clear wrong-kind error


def merge(
    base: str | os.PathLike[str],
    loras: Sequence[LoraArg],
    out: str | os.PathLike[str],
    *,
    dtype: torch.dtype | None = None,
    force: bool = False,
) -> Path:
    check_output_file(out)  # as given: "newdir/" names a folder (a Path would drop the slash)
    base_path, out_path = Path(base), Path(out)
    refuse_same_file(out_path, base_path, *(a.path for a in loras))
    if not loras:
        raise LoadoutError(
            "nothing to merge", fix="Name at least one LoRA file to merge", code="bad_argument"
        )
    bundle = _load_base(base_path)
    stack = LoraStack(bundle.components)
    record = []
    for arg in loras:
        entry = stack.add(arg.path, arg.model, arg.clip, force=force, block_weights=arg.block_weights)
        record.append(
            {
                "file": arg.path.name,
                "model_strength": entry.model_strength,
                "clip_strength": entry.clip_strength,
                "block_weights": arg.block_weights.text() if arg.block_weights else None,
                "base_family": entry.base_family,
                "matched": len(entry.report.matched),
                "unmatched": len(entry.report.unmatched),
            }
        )
    stack.apply()
    meta = {"loadout.merged": json.dumps(record)}
    return save_checkpoint(bundle, out_path, metadata=meta, dtype=dtype, also_not=[a.path for a in loras])
