"""What the workflows beside text-to-image ask for: ControlNets (ComfyUI's ControlNetApplyAdvanced),
an inpainting mask (SetLatentNoiseMask / InpaintModelConditioning), image prompts (IP-Adapter;
FLUX Redux: StyleModelApply) and the SDXL refiner hand-off (two KSamplerAdvanced nodes). Plain
values with their checks; the engine is in ``core.generate.controlnet``, ``inpaint``,
``ip_adapter``, ``redux`` and ``refiner``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.errors import LoadoutError
from core.generate.ip_embeds import COMBINE_MODES, EMBEDS_SCALINGS
from core.generate.ip_weights import COMPOSITION_TYPES, PRECISE_TYPES, WEIGHT_TYPES
from core.preprocess import find_preprocessor
from core.values import (
    CONTROLNET_PERCENT,
    CONTROLNET_STRENGTH,
    IP_ADAPTER_BOOST,
    IP_ADAPTER_PERCENT,
    IP_ADAPTER_WEIGHT,
    REDUX_STRENGTH,
    REFINER_SWITCH,
)


def _bad(what: str, why: str, fix: str) -> LoadoutError:
    return LoadoutError(what, why=why, fix=fix, code="bad_argument")


@dataclass(frozen=True)
class ControlNetUse:
    """One ControlNet: its file, the hint picture, strength and the part of the schedule it acts on
    (ComfyUI's start/end percent: 0 is the first, noisiest step). ``preprocessor``: the hint is made
    from the picture ``hint`` by that preprocessor (:mod:`core.preprocess`) when the generation runs.
    ``hint`` None: no hint picture, for a ControlNet that inpaints alone (Z-Image Fun 2.x: the
    picture to inpaint and its mask; refused in words for the others when the generation starts)."""

    path: Path
    hint: Path | None
    strength: float = 1.0
    start: float = 0.0
    end: float = 1.0
    preprocessor: str | None = None
    #: a union ControlNet's control type by name (ComfyUI's SetUnionControlNetType); None: auto
    control_type: str | None = None

    def __post_init__(self) -> None:
        if self.preprocessor is not None:
            find_preprocessor(self.preprocessor)
            if self.hint is None:
                raise _bad(
                    f"the {self.preprocessor} preprocessor was given no picture",
                    "a preprocessor makes the hint from a picture",
                    "Give the ControlNet a picture, or no preprocessor",
                )
        CONTROLNET_STRENGTH.check(self.strength)
        CONTROLNET_PERCENT.check(self.start)
        CONTROLNET_PERCENT.check(self.end)
        if self.start > self.end:
            raise _bad(
                f"ControlNet start {self.start} is after its end {self.end}",
                "a ControlNet acts from its start percent to its end percent",
                "Give a start at or before the end",
            )


@dataclass(frozen=True)
class ControlPictureUse:
    """The control picture of a model that takes one in its input channels (FLUX.1 Canny/Depth
    [dev], FLUX.1 [dev] with a control LoRA: ComfyUI's InstructPixToPixConditioning).
    ``preprocessor``: the picture is made from ``picture`` by that preprocessor (canny, depth ...)
    when the generation runs; None: it is given ready-made."""

    picture: Path
    preprocessor: str | None = None

    def __post_init__(self) -> None:
        if self.preprocessor is not None:
            find_preprocessor(self.preprocessor)


@dataclass(frozen=True)
class IpAdapterUse:
    """One image prompt: the IP-Adapter file, the picture, its weight and the part of the schedule
    it acts on (ComfyUI_IPAdapter_plus's start_at/end_at), its weight type (the pack's
    ``weight_type``: :data:`core.generate.ip_weights.WEIGHT_TYPES`) and its attention mask (a
    picture whose white marks where the image prompt acts, the pack's ``attn_mask``); for the
    style and composition types a composition picture (SDXL) and the composition blocks' weight
    (``composition_weight``, the pack's ``weight_composition``; None: 1); for the precise types
    the pack's ``style_boost`` / ``composition_boost`` (``boost``; None: the weight); "Mad
    Scientist" layer weights (``layer_weights``: :func:`core.generate.ip_weights.parse_layer_weights`'
    pairs); the embeds scaling (the pack's ``embeds_scaling``:
    :data:`core.generate.ip_embeds.EMBEDS_SCALINGS`), more pictures for the same adapter
    (``pictures``, after ``picture``) combined as ``combine`` says (the pack's ``combine_embeds``:
    :data:`core.generate.ip_embeds.COMBINE_MODES`), and the negative picture (the pack's
    ``image_negative``). The image encoder that reads the pictures is the settings'
    (``ImageSettings.image_encoder``) or the one found for it."""

    path: Path
    picture: Path
    weight: float = 1.0
    start: float = 0.0
    end: float = 1.0
    weight_type: str = "linear"
    mask: Path | None = None
    composition: Path | None = None
    composition_weight: float | None = None
    boost: float | None = None
    layer_weights: tuple[tuple[int, float], ...] = ()
    scaling: str = "V only"
    pictures: tuple[Path, ...] = ()
    combine: str = "concat"
    negative: Path | None = None
    #: FaceID Plus v2's shortcut scale (the pack's ``weight_faceidv2``; None: twice the weight)
    face_weight: float | None = None

    def __post_init__(self) -> None:
        self._check_embeds()
        if self.weight_type not in WEIGHT_TYPES:
            raise _bad(
                f"{self.weight_type!r} is not an IP-Adapter weight type",
                "the weight types are ComfyUI_IPAdapter_plus's: " + ", ".join(WEIGHT_TYPES),
                "Give one of them (e.g. style transfer)",
            )
        composing = self.composition is not None or self.composition_weight is not None
        if composing and self.weight_type not in COMPOSITION_TYPES:
            raise _bad(
                f"a composition picture or weight goes with {' or '.join(COMPOSITION_TYPES)}, "
                f"and the weight type is {self.weight_type}",
                "only those types have composition blocks of their own",
                "Pick the style and composition weight type, or leave the composition out",
            )
        if self.boost is not None and self.weight_type not in PRECISE_TYPES:
            raise _bad(
                f"a boost goes with {' or '.join(PRECISE_TYPES)}, and the weight type is {self.weight_type}",
                "it is ComfyUI_IPAdapter_plus's style_boost / composition_boost of the precise types",
                "Pick a precise weight type, or leave the boost out",
            )
        IP_ADAPTER_WEIGHT.check(self.weight)
        if self.composition_weight is not None:
            IP_ADAPTER_WEIGHT.check(self.composition_weight)
        if self.boost is not None:
            IP_ADAPTER_BOOST.check(self.boost)
        IP_ADAPTER_PERCENT.check(self.start)
        IP_ADAPTER_PERCENT.check(self.end)
        if self.start > self.end:
            raise _bad(
                f"IP-Adapter start {self.start} is after its end {self.end}",
                "an image prompt acts from its start percent to its end percent",
                "Give a start at or before the end",
            )

    def _check_embeds(self) -> None:
        if self.scaling not in EMBEDS_SCALINGS:
            raise _bad(
                f"{self.scaling!r} is not an IP-Adapter embeds scaling",
                "the scalings are ComfyUI_IPAdapter_plus's: " + ", ".join(EMBEDS_SCALINGS),
                "Give one of them (e.g. K+V)",
            )
        if self.combine not in COMBINE_MODES:
            raise _bad(
                f"{self.combine!r} is not a way to combine an IP-Adapter's pictures",
                "the ways are ComfyUI_IPAdapter_plus's combine_embeds: " + ", ".join(COMBINE_MODES),
                "Give one of them (e.g. average)",
            )
        if self.combine != "concat" and not self.pictures:
            raise _bad(
                f"combining the pictures ({self.combine}) needs more than one picture",
                "the combination says how several pictures for one IP-Adapter become one",
                "Give more pictures for the adapter, or leave the combination out",
            )
        if self.pictures and self.combine == "concat" and self.composition is not None:
            raise _bad(
                "several concatenated pictures and a composition picture do not go together",
                "the composition block reads one picture's tokens and the others a token row per "
                "picture (ComfyUI_IPAdapter_plus cannot lay them side by side either)",
                "Combine the pictures (e.g. average), or leave the composition picture out",
            )


#: ComfyUI's ``strength_type``: "multiply" scales the picture's tokens; "attn_bias" adds
#: ``log(strength)`` to the attention logits of every query on them
STRENGTH_TYPES = ("multiply", "attn_bias")


@dataclass(frozen=True)
class ReduxUse:
    """One picture given to a FLUX Redux style model, its strength and how the strength acts."""

    path: Path  # the style model file (flux1-redux-dev.safetensors)
    picture: Path
    strength: float = 1.0
    strength_type: str = "multiply"

    def __post_init__(self) -> None:
        REDUX_STRENGTH.check(self.strength)
        if self.strength_type not in STRENGTH_TYPES:
            raise LoadoutError(
                f"{self.strength_type!r} is not a Redux strength type",
                fix=f"Give one of {', '.join(STRENGTH_TYPES)}",
                code="bad_argument",
            )


@dataclass(frozen=True)
class RefinerUse:
    """The SDXL refiner and the fraction of the steps the base model runs (A1111's "switch at")."""

    path: Path
    switch: float = 0.8

    def __post_init__(self) -> None:
        REFINER_SWITCH.check(self.switch)

    def switch_step(self, steps: int) -> int:
        """The step the refiner starts at: ``round(steps * switch)`` clamped to 1..steps-1 (so both
        models run at least one step)."""
        return min(max(round(steps * self.switch), 1), max(steps - 1, 1))
