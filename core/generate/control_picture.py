"""A control picture in the model's input channels: FLUX.1 Canny/Depth [dev] (BFL's full models,
``img_in`` 128 wide) and FLUX.1 [dev] with a control LoRA (which widens ``img_in`` to 128), as
ComfyUI's templates run them: InstructPixToPixConditioning and the Flux model's ``concat_cond``.

* The picture (or the map a preprocessor makes of it: canny, depth) is cropped to a multiple of 8
  (centred) and VAE-encoded (the posterior's mean); the latent, in the model's space
  (``process_in``), is the model's 16 extra input channels after the noisy latent's, on the
  positive and the negative prompt alike. No mask and no noise mask (that is FLUX.1 Fill's
  InpaintModelConditioning, :mod:`core.generate.inpaint`).
* Each call resizes it to the call's latent (bilinear, centre crop to its aspect ratio:
  ``common_upscale``), as ``concat_cond`` does for the noise; so the picture's size does not have
  to be the generation's, and the hires pass gets it at its own size.

DiffSynth's In-Context Control Union LoRA for Qwen-Image (:mod:`core.detect.lora_qwen_control`)
takes its control picture otherwise, as ComfyUI's template wires it: ``VAEEncode`` of the picture
at its own size (cropped to the VAE's multiple) and ``ReferenceLatent`` on the positive and the
negative prompt -- a reference latent (:class:`~core.generate.references.ReferencePass` with the
``AsGiven`` convention), its tokens after the picture's.

Whether a model takes a control picture is read from the model (its input width, or a control
LoRA on the stack): one given to a model that takes none is refused in words (ComfyUI drops it
silently), as is a control model or LoRA without one (ComfyUI feeds zeros: a picture of nothing;
the Qwen-Image LoRA would run as a plain LoRA).
The PNG names it: ``Control picture: "edges.png [0123456789ab]"`` (and ``, Preprocessor: canny``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from core.archs.references import AsGiven
from core.detect.catalog import family_title
from core.detect.lora_flux_control import takes_control_picture
from core.errors import LoadoutError, ModelMismatchError
from core.generate.controlnet import center_resize
from core.generate.inpaint import crop8, encode_unit_pixels
from core.generate.passes import Contribution, Latent, Plan, Run, StartLatent
from core.generate.pictures import read_picture
from core.generate.references import ReferencePass, ReferencePicture, file_sha256
from core.generate.request import ImageSettings
from core.patching.lora_stack import LoraStack
from core.preprocess import preprocess
from core.preprocess.registry import ModelRun
from core.sampling.patches import ModelPatches

if TYPE_CHECKING:
    from core.generate.pipeline import Pipeline

#: the PNG parameters' key
PARAMETER = "Control picture"


def check_takes(takes: bool, given: bool, model: str) -> None:
    """Refuse a control picture a model does not take, and a control model without one."""
    if given and not takes:
        raise ModelMismatchError(
            f"the control picture is for a model that takes one, and {model} takes none",
            why="FLUX.1 Canny/Depth [dev], FLUX.1 [dev] with a Canny/Depth control LoRA and Qwen-Image "
            "with DiffSynth's In-Context Control Union LoRA read a control picture",
            fix="Load FLUX.1 Canny/Depth [dev], or add a FLUX.1 control LoRA or the Qwen-Image union "
            "control LoRA, or leave the control picture out (a ControlNet takes its own hint)",
            code="wrong_kind",
        )
    if takes and not given:
        raise LoadoutError(
            f"{model} needs a control picture",
            why="a FLUX.1 Canny/Depth model or control LoRA (or the Qwen-Image union control LoRA) "
            "follows a picture (an edge map, a depth map ...) that it reads beside the latent",
            fix="Give the control picture (or a photo and the canny or depth preprocessor), or take "
            "the control LoRA off",
            code="bad_argument",
        )


@dataclass(frozen=True)
class LatentConcat:
    """The control picture's latent (model space) as extra input channels for each call's size."""

    latent: Tensor  # (1, C, h, w) float32

    def __call__(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2], x.shape[-1]
        image = center_resize(self.latent, w, h, mode="bilinear")
        return image.to(device=x.device, dtype=x.dtype).expand(x.shape[0], -1, -1, -1)


def control_latent(run: Run, rgb: np.ndarray) -> Tensor:
    """InstructPixToPixConditioning's ``concat_latent_image`` in the model's space: the picture
    cropped to a multiple of 8 (centred), encoded, ``process_in``."""
    h, w = rgb.shape[0], rgb.shape[1]
    top, left, ch, cw = crop8(h, w)
    pixels = torch.from_numpy(np.array(rgb)).float().div(255.0).permute(2, 0, 1)[None]
    pixels = pixels[:, :, top : top + ch, left : left + cw]
    pipeline = run.pipeline
    return pipeline.latent_format.process_in(encode_unit_pixels(pipeline, pixels, run.hooks))


@dataclass(frozen=True)
class EncodeControlPicture:
    """The stage that encodes the control picture and gives the base model its extra inputs."""

    rgb: np.ndarray

    def __call__(self, latent: Latent | None, run: Run) -> Latent | None:
        run.patches += ModelPatches(extra_inputs=(LatentConcat(control_latent(run, self.rgb)),))
        return latent


@dataclass
class ControlPicturePass:
    """The control picture (already read, and preprocessed when asked) for every base stage."""

    rgb: np.ndarray
    kind: str = "control_picture"
    contribution: Contribution = field(default_factory=Contribution)

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        start = next(i for i, s in enumerate(plan.stages) if isinstance(s, StartLatent))
        plan.stages.insert(start + 1, EncodeControlPicture(self.rgb))


def has_control_lora(stack: LoraStack | None) -> bool:
    """Whether a FLUX.1 control LoRA on ``stack`` widens the model now (on, strength not 0)."""
    entries = stack.entries.values() if stack is not None else ()
    return any(e.enabled and e.model_strength != 0 and e.analysis.control_inputs for e in entries)


def has_reference_control_lora(stack: LoraStack | None) -> bool:
    """Whether a LoRA on ``stack`` that takes its control picture as a reference latent acts now."""
    entries = stack.entries.values() if stack is not None else ()
    return any(e.enabled and e.model_strength != 0 and e.analysis.control_reference for e in entries)


def reference_control_pass(settings: ImageSettings, picture: Path, rgb: np.ndarray) -> ReferencePass:
    """The control picture as the reference latent of a LoRA that takes it so (ComfyUI's
    ``VAEEncode`` + ``ReferenceLatent`` on both prompts); refused beside reference pictures."""
    if settings.references:
        raise LoadoutError(
            "reference pictures were given beside the Qwen-Image union control LoRA's control picture",
            why="the LoRA reads its control picture as the one reference latent it was trained with",
            fix="Leave the reference pictures out, or the control LoRA",
            code="bad_argument",
        )
    read = ReferencePicture(picture, rgb, file_sha256(picture))
    return ReferencePass((read,), AsGiven("control-reference"))


def control_picture_pass(
    settings: ImageSettings,
    pipeline: Pipeline,
    stack: LoraStack | None,
    family: str,
    run_model: ModelRun | None,
) -> ControlPicturePass | ReferencePass | None:
    """The pass of this generation's control picture (None when the model takes none and none is
    given): checked against the model (a ``family`` model with its LoRA ``stack``), read,
    preprocessed (``run_model`` runs a model preprocessor), named in the PNG with its short hash."""
    use = settings.control_picture
    adapter = pipeline.adapter
    as_reference = has_reference_control_lora(stack)
    takes = as_reference or takes_control_picture(
        adapter.in_channels, pipeline.latent_format.channels, has_control_lora(stack)
    )
    check_takes(takes, use is not None, f"a {family_title(family)} model")
    if use is None:
        return None
    rgb = read_picture(use.picture, "control picture")
    if use.preprocessor is not None:
        rgb = preprocess(use.preprocessor, rgb, model=run_model)
    made: ControlPicturePass | ReferencePass = (
        reference_control_pass(settings, Path(use.picture), rgb) if as_reference else ControlPicturePass(rgb)
    )
    named = f"{Path(use.picture).name} [{file_sha256(Path(use.picture))[:12]}]"
    made.contribution.parameters = control_parameters(named, use.preprocessor)
    return made


def control_parameters(name: str, preprocessor: str | None) -> dict[str, str]:
    """``Control picture: "edges.png [0123456789ab]"`` (``, Preprocessor: canny`` when one made it)."""
    text = name if preprocessor is None else f"{name}, Preprocessor: {preprocessor}"
    return {PARAMETER: text}


@dataclass(frozen=True)
class ControlPictureParameters:
    """The control picture as a picture's parameters name it."""

    name: str  # the file name, without its hash
    preprocessor: str | None = None


def control_picture_in(extra: dict[str, str]) -> ControlPictureParameters | None:
    """The ``Control picture`` item of an infotext's extra keys (None when there is none)."""
    text = extra.get(PARAMETER)
    if not text:
        return None
    head, _, rest = text.partition(", Preprocessor: ")
    name = head.rsplit(" [", 1)[0].strip() if head.endswith("]") else head.strip()
    return ControlPictureParameters(name, rest.strip() or None) if name else None
