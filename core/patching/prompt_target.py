"""Where a LoRA of the stack acts: everywhere (the default), or only while the network runs one
prompt's conditioning -- ComfyUI's hook LoRA (CreateHookLora) set on that conditioning
(ConditioningSetProperties / PairConditioningSetProperties ``hooks``).

A target is a hook label (:class:`core.sampling.cond_entry.CondEntry`): ``positive`` (every entry
of the positive prompt's list, its regions too), ``negative``, or ``regionN`` (the N-th region of
the settings, from 1: its entry, and the copy of its area in the other prompt's list). The LoRA's
text-encoder part acts on the targeted prompt's encoding only (ComfyUI's SetClipHooks): the
prompts whose conditioning carries the label (a region's with its side's label) are encoded with
it, the others without it (:mod:`core.generate.clip_hooks`)."""

from __future__ import annotations

import re

from core.errors import LoadoutError

#: the targets a LoRA may be given, in the order a chooser lists them
PROMPT_TARGETS: tuple[str, ...] = ("positive", "negative")


def check_target(target: str | None) -> str | None:
    """``target`` (lower-cased) or None for everywhere; refused in words when unknown."""
    if target is None or not target.strip() or target.strip().lower() in ("all", "both", "everywhere"):
        return None
    name = target.strip().lower()
    region = re.fullmatch(r"region\s*0*([1-9][0-9]{0,2})", name)
    if region is not None:
        return f"region{region.group(1)}"
    if name not in PROMPT_TARGETS:
        raise LoadoutError(
            f"a LoRA cannot be put on {target!r}",
            why=f"a LoRA acts everywhere, on a prompt ({', '.join(PROMPT_TARGETS)}) or a region (region1..)",
            fix="Give on=positive, on=negative or on=region1, or leave it out for everywhere",
            code="bad_argument",
        )
    return name


def region_label(index: int) -> str:
    """The hook label of the settings' region ``index`` (from 0)."""
    return f"region{index + 1}"


__all__ = ["PROMPT_TARGETS", "check_target", "region_label"]
