"""The patches that run the network once more on the positive prompt with part of it perturbed,
and steer away from that prediction: Perturbed-Attention Guidance (``nodes_pag.py``: the UNet
middle block's self-attention replaced by its values) and Skip Layer Guidance
(``nodes_slg.py``: chosen DiT blocks left out, for part of the schedule). Both are post-CFG
functions: ``denoised + (cond - perturbed) * scale``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from core.guidance.base import LEAVE, GuidanceContext, check_record, layers, number, refuse
from core.models.attention import attention
from core.models.patches import AttentionCall, NetworkPatches, Site
from core.sampling.patches import CfgCall, ModelPatches

MIDDLE = Site("middle", 0)


def identity_self_attention(call: AttentionCall) -> Tensor:
    """PAG's attention: the values themselves where the middle block attends to itself (every
    transformer layer of it, as ComfyUI's ``("middle", 0)`` replacement), plain elsewhere."""
    if call.site == MIDDLE and call.kind == "self":
        return call.v
    return attention(call.q, call.k, call.v, call.heads, call.mask)


def perturbed_guidance(denoised: Tensor, cond: Tensor, perturbed: Tensor, scale: float) -> Tensor:
    return denoised + (cond - perturbed) * scale


@dataclass(frozen=True)
class Pag:
    name: ClassVar[str] = "pag"
    title: ClassVar[str] = "Perturbed-Attention Guidance"
    scale: float = number(3.0, 0.0, 100.0, "the scale")

    def __post_init__(self) -> None:
        check_record(self)

    def model_patches(self, context: GuidanceContext) -> ModelPatches:
        context.points.require(
            self.title, "unsupported_family", blocks=("middle",), attention=("self",), fix=LEAVE
        )
        scale, perturb = self.scale, NetworkPatches(replace_attention=identity_self_attention)

        def post(call: CfgCall, denoised: Tensor) -> Tensor:
            if scale == 0:
                return denoised
            return perturbed_guidance(denoised, call.cond, call.predict_positive(perturb), scale)

        return ModelPatches(post_cfg=(post,))


#: the stage SLG's "double" layers are on, by network (MMDiT's joint blocks, Flux's double blocks)
DOUBLE_STAGES = ("joint", "double")


@dataclass(frozen=True)
class Slg:
    """SkipLayerGuidanceDiT (and SkipLayerGuidanceSD3: its ``layers`` are the double layers)."""

    name: ClassVar[str] = "slg"
    title: ClassVar[str] = "Skip Layer Guidance"
    double_layers: tuple[int, ...] = layers((7, 8, 9), "the double layers")
    single_layers: tuple[int, ...] = layers((7, 8, 9), "the single layers")
    scale: float = number(3.0, 0.0, 10.0, "the scale")
    start_percent: float = number(0.01, 0.0, 1.0, "the start percent")
    end_percent: float = number(0.15, 0.0, 1.0, "the end percent")
    rescaling_scale: float = number(0.0, 0.0, 10.0, "the rescaling scale")

    def __post_init__(self) -> None:
        check_record(self)

    def skipped(self, context: GuidanceContext) -> frozenset[Site]:
        """The sites to leave out on this network; refused where it has no skippable blocks or
        the layers are past its blocks."""
        points = context.points
        double = next((s for s in DOUBLE_STAGES if s in points.skips), None)
        if double is None:
            why = "it leaves out transformer blocks of a DiT (SD3, Flux), which this network has none of"
            raise refuse(self.title, why)
        wanted = [(double, n) for n in self.double_layers]
        if "single" in points.skips:
            wanted += [("single", n) for n in self.single_layers]
        past = [f"{stage} {n}" for stage, n in wanted if n >= points.blocks.get(stage, 0)]
        if past:
            raise refuse(self.title, f"this network has no block {', '.join(past)}")
        return frozenset(Site(stage, n) for stage, n in wanted)

    def model_patches(self, context: GuidanceContext) -> ModelPatches:
        skip = NetworkPatches(skip=self.skipped(context))
        if not skip.skip:
            return ModelPatches()  # no layers: ComfyUI gives the model back unpatched
        start = float(context.sampling.percent_to_sigma(self.start_percent))
        end = float(context.sampling.percent_to_sigma(self.end_percent))
        scale, rescaling = self.scale, self.rescaling_scale

        def post(call: CfgCall, denoised: Tensor) -> Tensor:
            sigma = float(call.sigma[0])
            if not (scale > 0 and end <= sigma <= start):
                return denoised
            out = perturbed_guidance(denoised, call.cond, call.predict_positive(skip), scale)
            if rescaling != 0:
                factor = call.cond.std() / out.std()
                out = out * (rescaling * factor + (1 - rescaling))
            return out

        return ModelPatches(post_cfg=(post,))
