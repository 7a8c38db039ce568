"""LoRA hooks as a pass: schedules (:mod:`core.patching.schedule`) and LoRAs on one prompt only
(:mod:`core.patching.prompt_target`). A model wrapper, before each network call of a sampling with
the base model, finds each hooked LoRA's strength for that call -- its own strength, times the
keyframe in force at the call's sigma when it has a schedule, times 0 when it acts on one prompt
and the call's hook group (:attr:`ModelCall.hooks`, one per call: the sampler splits the
conditioning entries by group, ComfyUI's ``calc_cond_batch``) is not that prompt's -- and, when it
differs from the one the weights have, sets the LoRA's strength and brings the weights to it
(``set_strength``: the session's stack policy — on the CPU the keys that LoRA touches are
re-baked, on a device the placed copies are refreshed and streamed layers read the new strength
at their next cast). So the weights change only at keyframes and between
hook groups (ComfyUI's ``apply_hooks`` per group: a LoRA on the positive prompt is baked before
the positive's call and taken out before the negative's, each step), and each call's weights are
the bake of its strength, bit for bit. The pass gives each targeted prompt's entries its label
(:attr:`ModelPatches.positive_hooks`); without a targeted LoRA no entry has one, so the positive
and negative prompts still run as one batch.

Every sampling (the hires fix's second pass too) starts from the first keyframe again, as
ComfyUI resets its hooks per sampling; :meth:`LoraSchedulePass.finish` puts each LoRA back at its
own strength (also after a stop or an error)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from torch import Tensor

from core.errors import LoadoutError
from core.generate.passes import Contribution, Plan
from core.generate.request import ImageSettings
from core.patching.prompt_target import region_label
from core.patching.schedule import KeyframeClock, LoraSchedule, format_schedules
from core.sampling.patches import Apply, ModelCall, ModelPatches, StepInfo

#: sets one LoRA's model strength and makes the weights follow it
SetStrength = Callable[[str, float], None]


def check_schedules(schedules: tuple[LoraSchedule, ...], strengths: Mapping[str, float]) -> None:
    """Refuse a schedule of a LoRA the stack does not hold, or two of one LoRA, in words."""
    seen: set[str] = set()
    for s in schedules:
        if s.lora not in strengths:
            names = ", ".join(sorted(strengths)) or "none"
            raise LoadoutError(
                f"the LoRA schedule names {s.lora!r}, which is not in the LoRA stack",
                why=f"the stack holds: {names}",
                fix="Name a LoRA of the stack by its name (its file name without the extension)",
                code="bad_argument",
            )
        if s.lora in seen:
            raise LoadoutError(
                f"the LoRA {s.lora!r} has two schedules",
                fix="Give each LoRA one schedule",
                code="bad_argument",
            )
        seen.add(s.lora)


@dataclass
class LoraSchedulePass:
    schedules: tuple[LoraSchedule, ...]
    #: each hooked LoRA's own model strength (what a keyframe multiplies)
    strengths: Mapping[str, float]
    set_strength: SetStrength
    #: the LoRAs that act on one prompt only: LoRA -> its prompt's hook label
    targets: Mapping[str, str] = field(default_factory=dict)
    kind: str = "schedules"
    contribution: Contribution = field(default_factory=Contribution)
    #: the strength each hooked LoRA has now (set by this pass)
    current: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_schedules(self.schedules, self.strengths)
        hooked = [s.lora for s in self.schedules] + [t for t in self.targets if t in self.strengths]
        self.current = {lora: self.strengths[lora] for lora in hooked}
        if self.schedules:
            self.contribution.parameters = {"LoRA schedules": format_schedules(self.schedules)}

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        sampling = plan.pipeline.sampling
        starts = {s.lora: [sampling.percent_to_sigma(k.start) for k in s.keyframes] for s in self.schedules}
        clocks: dict[str, KeyframeClock] = {}
        targets = {lora: label for lora, label in self.targets.items() if lora in self.current}

        def wrapper(call: ModelCall, apply: Apply) -> Tensor:
            sigma = float(call.sigma.reshape(-1)[0])
            wanted = {lora: self.strengths[lora] for lora in self.current}
            for s in self.schedules:
                clock = clocks.get(s.lora)
                if clock is None:  # a new sampling: its first sigma is its highest
                    clock = clocks[s.lora] = KeyframeClock(s.keyframes, starts[s.lora], sigma)
                wanted[s.lora] *= clock.strength(sigma)
            for lora, label in targets.items():
                if label not in call.hooks:
                    wanted[lora] = 0.0
            for lora, strength in wanted.items():
                self._set(lora, strength)
            return apply(call)

        def on_step(info: StepInfo) -> None:
            if info.step >= info.total:
                clocks.clear()  # the sampling is over: the next one starts from the first keyframe

        labels = frozenset(targets.values())
        regions = {region_label(i) for i in range(len(settings.regions))}
        for lora, label in targets.items():
            if label not in regions | {"positive", "negative"}:
                raise LoadoutError(
                    f"the LoRA {lora!r} is put on {label}, and the settings have {len(regions)} region(s)",
                    fix="Put it on a region the settings have (region1 is the first), or on a prompt",
                    code="bad_argument",
                )
        plan.patches += ModelPatches(
            wrappers=(wrapper,), steps=(on_step,), hook_labels=labels,
            positive_hooks=labels & {"positive"}, negative_hooks=labels & {"negative"},
        )  # fmt: skip

    def _set(self, lora: str, strength: float) -> None:
        if self.current[lora] != strength:
            self.set_strength(lora, strength)
            self.current[lora] = strength

    def finish(self) -> None:
        """Each LoRA back at its own strength."""
        for lora, strength in self.strengths.items():
            if lora in self.current:
                self._set(lora, strength)


__all__ = ["LoraSchedulePass", "check_schedules"]
