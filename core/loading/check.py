"""``loadout check``: build each component's network on the meta device and compare it with the
file, key by key and shape by shape. No tensor data is read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from core.detect.types import kind_phrase
from core.errors import LoadoutError
from core.loading.loader import _view, inspect_for_loading
from core.loading.plan import plan_component


def check_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The contract record ``{"path", "family", "ok", "components": [...]}``; bad input goes into
    ``error`` (with ``ok: false``) instead of raising."""
    p = Path(path)
    record: dict[str, Any] = {"path": str(p), "family": None, "ok": False, "components": [], "error": None}
    try:
        index, det = inspect_for_loading(p)
    except LoadoutError as exc:
        record["error"] = exc.to_json()
        return record
    record["family"] = det.family
    if not det.components:
        record["error"] = {
            "code": "nothing_to_check",
            "message": f"{p.name} is {kind_phrase(det.kind)}: it has no network to check. "
            "Use `loadout inspect` for it.",
        }
        return record
    ok = True
    for comp in det.components:
        entry: dict[str, Any] = {"role": comp.role, "family": comp.family, "prefix": comp.prefix}
        try:
            plan = plan_component(
                _view(index, comp), comp.role, comp.family, comp.layout, prefix=comp.prefix, name=p.name
            )
            entry.update(plan.report.to_json())
            ok = ok and plan.report.ok
        except LoadoutError as exc:
            entry.update({"missing": [], "unexpected": [], "shape_mismatches": [], "error": exc.to_json()})
            ok = False
        record["components"].append(entry)
    record["ok"] = ok
    return record
