"""The guidance patches of a generation (:mod:`core.guidance`) as a pass: each patch's model patches
for the base model, in the order given, on every stage the base model samples (the hires fix's
second pass too; not the refiner's, a model of its own that ComfyUI patches separately). A patch
that needs a point the base network lacks is refused here, before anything runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.generate.latent_upscale import resize
from core.generate.passes import Contribution, Plan
from core.generate.request import ImageSettings
from core.guidance import GuidanceContext, GuidancePatch


@dataclass
class GuidancePass:
    patches: tuple[GuidancePatch, ...]
    kind: str = "guidance"
    contribution: Contribution = field(default_factory=Contribution)

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        adapter = plan.pipeline.adapter
        channels = getattr(adapter.config, "model_channels", None)
        context = GuidanceContext(
            adapter.patch_points, plan.pipeline.sampling, None if channels is None else int(channels), resize
        )
        for patch in self.patches:
            plan.patches += patch.model_patches(context)
