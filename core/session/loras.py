"""The main model's LoRA stack and the bake-or-refresh policy.

Where the stack takes effect depends on the placement: without a device it is baked into the CPU
weights (``LoraStack.apply``, incremental; a moving slider runs low-rank side paths instead); with
a device the RAM copy stays the file's memory-mapped tensors and the mover applies the stack —
resident weights get patched device copies (:meth:`Placement.refresh` re-applies only keys whose
patches changed) and streamed layers are patched at cast time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.patching.block_weights import BlockWeights
from core.patching.lora_stack import LoraStack, compatible
from core.session.placement import Placement
from core.session.snapshots import LoraInfo, StackInfo
from core.session.words import no_model


@dataclass(frozen=True)
class LoraOptions:
    """How a LoRA is applied besides its strengths, for the LoRA of id ``name`` in any case (a
    LoRA's id is its file name without the extension, what a picture's tag names; a second copy of
    one file is ``name (2)``): its block weights as a tag writes them ("" none) and the prompt it
    acts on only (None everywhere)."""

    name: str
    block_weights: str = ""
    on: str | None = None


@dataclass(frozen=True)
class StackChange:
    """Several changes to the stack made as one operation (a picture's settings): LoRAs switched
    on and off by id, strengths set (id, model, text encoder), files added (path, model, text
    encoder) and options set (the added files' too). The weights follow once, after
    all of them."""

    enable: tuple[str, ...] = ()
    disable: tuple[str, ...] = ()
    strengths: tuple[tuple[str, float, float], ...] = ()
    add: tuple[tuple[Path, float, float], ...] = ()
    options: tuple[LoraOptions, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.enable or self.disable or self.strengths or self.add or self.options)


def _set_options(stack: LoraStack, options: tuple[LoraOptions, ...]) -> None:
    """Each option on the stack's LoRAs of its file name; block weights the model has no blocks
    for are refused in words, and every option set before is put back."""
    by_name = {o.name.strip().lower(): o for o in options}
    done: list[tuple[str, BlockWeights | None, str | None]] = []
    try:
        for entry in list(stack.entries.values()):
            option = by_name.get(entry.id.lower())
            if option is None:
                continue
            done.append((entry.id, entry.block_weights, entry.on))
            weights = BlockWeights.parse(option.block_weights) if option.block_weights else None
            if weights != entry.block_weights:
                stack.set_block_weights(entry.id, weights)
            stack.set_on(entry.id, option.on)
    except Exception:
        for lora_id, weights, on in reversed(done):
            stack.set_block_weights(lora_id, weights)
            stack.set_on(lora_id, on)
        raise


class LoraControl:
    """The stack of the model in the main slot (``stack`` None when there is none)."""

    def __init__(self, placement: Callable[[], Placement], event: Callable[[str, str, str], None]) -> None:
        self._placement = placement
        self._event = event
        self.stack: LoraStack | None = None

    def _require(self) -> LoraStack:
        if self.stack is None:
            raise no_model()
        return self.stack

    # -- policy -----------------------------------------------------------------------------------
    def sync(self) -> int:
        """Make the weights follow the stack; returns how many were recomputed. On the CPU the
        stack is baked into the weights; with a device the placed copies are updated (the RAM copy
        stays the file's tensors) and what is not placed gets the stack when it is."""
        stack = self._require()
        placement = self._placement()
        if placement.active:
            return sum(placement.refresh(p) for p in stack.patchers.values())
        return sum(r.recomputed for r in stack.apply().values())

    def moved(self, was_active: bool, active: bool) -> None:
        """The placement changed between CPU and a device: move the stack to the other side."""
        if self.stack is None or was_active == active:
            return
        if active:
            self.stack.unpatch()  # the mover applies the stack when it places a model
        else:
            self.stack.apply()  # computed on the CPU from now on: bake the stack into the weights

    # -- operations -------------------------------------------------------------------------------
    def add(
        self,
        path: Path,
        model: float,
        clip: float | None = None,
        force: bool = False,
        block_weights: BlockWeights | None = None,
        on: str | None = None,
    ) -> StackInfo:
        stack = self._require()
        entry = stack.add(path, model, clip, force=force, block_weights=block_weights, on=on)
        try:
            n = self.sync()
        except Exception:
            stack.remove(entry.id)
            self.sync()
            raise
        keys = sum(len(k) for k in entry.keys.values())
        done = f"{n} weights patched"
        placement = self._placement()
        if placement.active:
            placed = any(placement.is_placed(p) for p in stack.patchers.values())
            done = (
                f"{keys} weights patched: {n} placed copies recomputed, streamed layers at each step"
                if placed
                else f"{keys} weights to patch when the model is placed"
            )
        self._event(
            "lora",
            f"LoRA {path.name}",
            f"{len(entry.report.matched)} modules matched, {len(entry.report.unmatched)} unmatched; "
            f"{done} (model {entry.model_strength:g}, text encoder {entry.clip_strength:g})",
        )
        return self.info(recomputed=n)

    def change(self, change: StackChange) -> StackInfo:
        """``change`` as one operation: the files are added first (a file that cannot be added
        leaves the stack as it was), then the switches and strengths, then the weights follow once.
        Ids no longer on the stack are passed over (the stack changed since the plan was made)."""
        stack = self._require()
        added: list[str] = []
        try:
            for path, model, clip in change.add:
                added.append(stack.add(path, model, clip).id)
        except Exception:
            for lora_id in added:
                stack.remove(lora_id)
            raise
        for ids, on in ((change.enable, True), (change.disable, False)):
            for lora_id in ids:
                if lora_id in stack.entries:
                    stack.set_enabled(lora_id, on)
        for lora_id, model, clip in change.strengths:
            if lora_id in stack.entries:
                stack.set_strength(lora_id, model=model, clip=clip)
        try:
            _set_options(stack, change.options)
            n = self.sync()
        except Exception:
            for lora_id in added:
                stack.remove(lora_id)
            self.sync()
            raise
        self._event(
            "lora",
            "a picture's LoRAs",
            f"{len(change.add)} added, {len(change.enable)} switched on, {len(change.disable)} off, "
            f"{len(change.strengths)} strengths set, {len(change.options)} options set; "
            f"{n} weights recomputed once",
        )
        return self.info(recomputed=n)

    def set_strength(self, lora_id: str, model: float | None, clip: float | None, bake: bool) -> StackInfo:
        """A new strength; ``bake`` False (a slider moving) previews it as side paths on the CPU."""
        stack = self._require()
        if lora_id not in stack.entries:
            return self.info()
        stack.set_strength(lora_id, model=model, clip=clip)
        if not bake and not self._placement().active and stack.preview():
            return self.info(baked=False)
        return self.info(recomputed=self.sync())

    def set_on(self, lora_id: str, on: str | None) -> StackInfo:
        """The prompt a LoRA acts on only (None: everywhere): generations take it; the weights
        between them stay the stack's."""
        stack = self._require()
        if lora_id in stack.entries:
            stack.set_on(lora_id, on)
        return self.info()

    def set_block_weights(self, lora_id: str, weights: BlockWeights | None) -> StackInfo:
        """New block weights of a LoRA (None: one strength everywhere), baked or refreshed."""
        stack = self._require()
        if lora_id not in stack.entries:
            return self.info()
        old = stack.entries[lora_id].block_weights
        stack.set_block_weights(lora_id, weights)
        try:
            return self.info(recomputed=self.sync())
        except Exception:
            stack.set_block_weights(lora_id, old)
            self.sync()
            raise

    def set_enabled(self, lora_id: str, enabled: bool) -> StackInfo:
        self._require().set_enabled(lora_id, enabled)
        return self.info(recomputed=self.sync())

    def remove(self, lora_id: str) -> StackInfo:
        stack = self._require()
        name = stack.entries[lora_id].path.name
        stack.remove(lora_id)
        info = self.info(recomputed=self.sync())
        self._event("lora", f"remove {name}", "removed; its changes were taken out of the weights")
        return info

    def reorder(self, order: Sequence[str]) -> StackInfo:
        self._require().reorder(order)
        return self.info(recomputed=self.sync())

    # -- snapshot ---------------------------------------------------------------------------------
    def info(self, *, baked: bool = True, recomputed: int = 0) -> StackInfo:
        if self.stack is None:
            return StackInfo(None)
        fam = self.stack.model_family
        loras = []
        for e in self.stack.entries.values():
            warning = None
            if fam is not None and not compatible(e.base_family, fam):
                warning = f"made for {e.base_family}, the loaded model is {fam}: only what fits is applied"
            info = LoraInfo(
                id=e.id, path=e.path, base_family=e.base_family, model_strength=e.model_strength,
                clip_strength=e.clip_strength, enabled=e.enabled, matched=len(e.report.matched),
                unmatched=len(e.report.unmatched), skipped=len(e.skipped),
                shape_mismatches=len(e.report.shape_mismatches), family_warning=warning,
                format=e.analysis.summary.format, targets=tuple(e.keys),
                trained_scale=e.analysis.summary.trained_scale, on=e.on,
                block_weights=e.block_weights.text() if e.block_weights else "",
                control=e.analysis.control_inputs is not None or e.analysis.control_reference,
            )  # fmt: skip
            loras.append(info)
        return StackInfo(fam, tuple(loras), baked, recomputed, self._applied_words())

    def _applied_words(self) -> str:
        placement = self._placement()
        if not placement.active or self.stack is None:
            return "baked into the weights"
        if any(placement.is_placed(p) for p in self.stack.patchers.values()):
            return (
                f"applied on {placement.describe().label}: placed weights patched there, "
                "streamed layers at each step; the RAM copy stays the file's"
            )
        return "recorded; applied when the model is placed on the device (or runs)"

    def patched_keys(self) -> dict[str, int]:
        """Per patched component name, how many of its keys the stack patches."""
        if self.stack is None:
            return {}
        return {name: len(p.patched_keys()) for name, p in self.stack.patchers.items()}
