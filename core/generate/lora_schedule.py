"""LoRA schedules as a pass (:mod:`core.patching.schedule`): a model wrapper that, before each
network call of a sampling with the base model, finds the keyframe in force at the call's sigma
and, when the strength it asks for differs from the one the weights have, sets the LoRA's strength
and brings the weights to it (``set_strength``: the session's stack policy — on the CPU the keys
that LoRA touches are re-baked, on a device the placed copies are refreshed and streamed layers
read the new strength at their next cast). So the weights change only at keyframes, and each
step's weights are the bake of that step's strength, bit for bit.

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
    #: each scheduled LoRA's own model strength (what a keyframe multiplies)
    strengths: Mapping[str, float]
    set_strength: SetStrength
    kind: str = "schedules"
    contribution: Contribution = field(default_factory=Contribution)
    #: the strength each scheduled LoRA has now (set by this pass)
    current: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_schedules(self.schedules, self.strengths)
        self.current = {s.lora: self.strengths[s.lora] for s in self.schedules}
        self.contribution.parameters = {"LoRA schedules": format_schedules(self.schedules)}

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        sampling = plan.pipeline.sampling
        starts = {s.lora: [sampling.percent_to_sigma(k.start) for k in s.keyframes] for s in self.schedules}
        clocks: dict[str, KeyframeClock] = {}

        def wrapper(call: ModelCall, apply: Apply) -> Tensor:
            sigma = float(call.sigma.reshape(-1)[0])
            for s in self.schedules:
                clock = clocks.get(s.lora)
                if clock is None:  # a new sampling: its first sigma is its highest
                    clock = clocks[s.lora] = KeyframeClock(s.keyframes, starts[s.lora], sigma)
                self._set(s.lora, self.strengths[s.lora] * clock.strength(sigma))
            return apply(call)

        def on_step(info: StepInfo) -> None:
            if info.step >= info.total:
                clocks.clear()  # the sampling is over: the next one starts from the first keyframe

        plan.patches += ModelPatches(wrappers=(wrapper,), steps=(on_step,))

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
