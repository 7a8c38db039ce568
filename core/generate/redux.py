"""Image prompts by FLUX Redux, as ComfyUI's Redux template wires them: each picture is read
(LoadImage), encoded by SigLIP (``CLIPVisionEncode`` with its centre crop: :mod:`core.archs.image_encoders`),
turned into 729 prompt tokens by the style model (``StyleModel.get_cond``) and appended to the
positive prompt's T5 context (``StyleModelApply``); several pictures append in order. The negative
prompt is left as it is (the template applies the style model to the positive conditioning only).
The strength acts as ComfyUI's strength type says: "multiply" scales the tokens; "attn_bias" keeps
them and adds ``log(strength)`` to the attention logits on their keys (a span of the positive
conditioning's ``attention_bias`` and a model wrapper that turns it into an attention patch on
the network's joint attention: :mod:`core.sampling.prompt_bias`; at strength 1 nothing).

:func:`read_pictures` reads and hashes every picture before any model is placed;
:class:`ReduxPass` adds the encoding to the plan as a step run before the prompts are encoded,
which places the encoder and the style models through the manager (``place``) first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from core.detect.catalog import REGISTRY
from core.errors import LoadoutError, ModelMismatchError
from core.generate.passes import Appended, Contribution, Plan, Run
from core.generate.pictures import read_picture, unit_pixels
from core.generate.references import file_sha256
from core.generate.request import ImageSettings
from core.generate.workflow_request import ReduxUse
from core.loading.image_encoder import LoadedImageEncoder
from core.loading.image_prompts import LoadedStyleModel
from core.sampling.patches import ModelPatches
from core.sampling.prompt_bias import bias_value, prompt_bias_wrapper

#: the PNG parameters' items: ``Redux 0``, ``Redux 1`` ...
PARAMETER = "Redux"
#: the tokens one picture appends (SigLIP so400m's 27 x 27 patches)
REDUX_TOKENS = 729


def takes_redux(family: str, style_family: str = "flux") -> bool:
    """Whether a diffusion model of ``family`` takes a style model of ``style_family`` (FLUX Redux
    fits the models of the FLUX.1 LoRA group, whose prompt context is T5's 4096-wide tokens)."""
    fam = REGISTRY.get(family)
    return fam is not None and fam.diffusion is not None and fam.lora_group == style_family


def check_family(family: str) -> None:
    """Refused in words for a model Redux does not fit (before anything is read)."""
    if not takes_redux(family):
        found = REGISTRY.get(family)
        title = found.title if found is not None else family
        raise ModelMismatchError(
            f"FLUX Redux gives image prompts to FLUX.1 models, and the model is {title}",
            why="Redux's tokens are T5 prompt tokens of the FLUX.1 models (4096 wide)",
            fix="Load a FLUX.1 model (dev, schnell, Kontext, Fill), or leave the Redux pictures out",
            code="wrong_kind",
        )


def check_strength_type(use: ReduxUse) -> None:
    """Refused in words: strength 0 with "attn_bias" (its bias, log 0, is minus infinity: ComfyUI
    takes it, and its mask turns into NaN where it is stretched to the picture's tokens)."""
    if use.strength_type == "attn_bias" and use.strength <= 0:
        raise LoadoutError(
            f"Redux strength {use.strength:g} cannot be used with the strength type attn_bias",
            why="attn_bias adds log(strength) to the attention on the picture's tokens, and the log of 0 "
            "is minus infinity (ComfyUI's mask then holds NaN: a black picture)",
            fix="Give a strength above 0 (e.g. 0.1), or the strength type multiply, or leave the picture out",
            code="bad_argument",
        )


def attention_bias(use: ReduxUse) -> float | None:
    """The bias on the picture's tokens: log(strength) for "attn_bias" (none at strength 1, as
    ComfyUI adds its mask only then), none for "multiply"."""
    if use.strength_type != "attn_bias" or use.strength == 1.0:
        return None
    return bias_value(use.strength)


def bias_room(pictures: Sequence[ReduxPicture], size: tuple[int, int], text_tokens: int = 512) -> int:
    """Room for the attention bias's mask while sampling (0 without one): one float32 value per
    query and key of the joint sequence, the prompt's ``text_tokens`` plus 729 per picture and the
    picture's tokens (FLUX.1's 2 x 2 patches of an 8 x smaller latent) at ``size`` (width, height)."""
    if not any(attention_bias(p.use) is not None for p in pictures):
        return 0
    w, h = size
    tokens = text_tokens + REDUX_TOKENS * len(pictures) + -(-w // 16) * -(-h // 16)
    return 4 * tokens * tokens


def token_scale(use: ReduxUse) -> float:
    """What the tokens are multiplied by: the strength for "multiply", 1 for "attn_bias"."""
    return use.strength if use.strength_type == "multiply" else 1.0


@dataclass(frozen=True)
class ReduxPicture:
    """One picture as read, with its use: (H, W, 3) uint8 RGB and the file's SHA-256."""

    use: ReduxUse
    rgb: np.ndarray
    sha256: str


def read_pictures(uses: Sequence[ReduxUse], family: str) -> tuple[ReduxPicture, ...]:
    """Each picture read and hashed (the family and strength types checked first)."""
    check_family(family)
    for use in uses:
        check_strength_type(use)
    return tuple(
        ReduxPicture(u, read_picture(u.picture, "Redux picture"), file_sha256(u.picture)) for u in uses
    )


def redux_tokens(
    encoder: LoadedImageEncoder, style: LoadedStyleModel, picture: Tensor, strength: float,
    device: torch.device, dtype: torch.dtype,
) -> Tensor:  # fmt: skip
    """``CLIPVisionEncode`` (centre crop) then ``StyleModelApply``'s tokens of one ``[1, 3, H, W]``
    picture in [0, 1] times ``strength`` (:func:`token_scale`), computed on ``device`` in ``dtype``:
    ``[1, 729, context width]`` float32 tokens (the encoder's last hidden state handed on in
    float32, as ComfyUI does)."""
    hidden = encoder.arch.encode(encoder.module, picture, device, dtype).last_hidden_state.float()
    cond = style.arch.tokens(style.module, hidden, device=device, dtype=dtype)
    return cond.flatten(0, 1).unsqueeze(0) * strength


@dataclass(frozen=True)
class EncodeRedux:
    """Before the prompts: the models placed, each picture turned into its prompt tokens."""

    pictures: tuple[ReduxPicture, ...]
    encoder: LoadedImageEncoder
    styles: tuple[LoadedStyleModel, ...]  # one per picture (the same file shared)
    place: Callable[[], None]

    def __call__(self, run: Run) -> None:
        self.place()
        compute = run.pipeline.compute
        tokens = []
        for picture, style in zip(self.pictures, self.styles, strict=True):
            run.hooks.check()
            with torch.no_grad():
                unit, scale = unit_pixels(picture.rgb), token_scale(picture.use)
                made = redux_tokens(self.encoder, style, unit, scale, compute.device, compute.text_dtype)
                tokens.append(Appended(made, attention_bias(picture.use)))
        prompts = run.image_prompts
        run.image_prompts = replace(prompts, appended=(*prompts.appended, *tokens))


def parameter_items(pictures: Sequence[ReduxPicture], named: Callable[[Path], str]) -> dict[str, str]:
    """``Redux 0: "Model: flux1-redux-dev [0123456789], Picture: a.png [0123456789ab], Strength: 1,
    Type: multiply"`` per picture (commas dropped from the names)."""
    out = {}
    for i, p in enumerate(pictures):
        u = p.use
        model, shown = named(u.path).replace(",", ""), Path(u.picture).name.replace(",", "")
        out[f"{PARAMETER} {i}"] = (
            f"Model: {model}, Picture: {shown} [{p.sha256[:12]}], Strength: {u.strength:g}, "
            f"Type: {u.strength_type}"
        )
    return out


@dataclass(frozen=True)
class ReduxParameters:
    """One Redux picture as a picture's parameters name it."""

    model: str
    picture: str
    hash: str
    strength: float
    strength_type: str = "multiply"


def redux_in(extra: dict[str, str]) -> tuple[ReduxParameters, ...]:
    """The ``Redux 0``, ``Redux 1``... items of an infotext's extra keys, in order; items that do
    not read as Loadout's form are left out."""
    found: list[tuple[int, ReduxParameters]] = []
    for key, text in extra.items():
        head, _, index = key.partition(" ")
        if head != PARAMETER or not index.isdigit():
            continue
        fields = {k.strip(): v.strip() for k, _, v in (part.partition(":") for part in text.split(", "))}
        picture, _, digest = fields.get("Picture", "").rpartition(" [")
        try:
            item = ReduxParameters(
                fields["Model"].rsplit(" [", 1)[0], picture, digest.rstrip("]"),
                float(fields.get("Strength", "1")), fields.get("Type", "multiply"),
            )  # fmt: skip
        except (KeyError, ValueError):
            continue
        found.append((int(index), item))
    return tuple(item for _, item in sorted(found, key=lambda p: p[0]))


@dataclass
class ReduxPass:
    """Image prompts: the pictures encoded before the prompts, their tokens appended to every base
    sampler's positive prompt (``ImagePrompts.appended``: :func:`core.generate.passes.append_tokens`)."""

    pictures: tuple[ReduxPicture, ...]
    encoder: LoadedImageEncoder
    styles: tuple[LoadedStyleModel, ...]
    place: Callable[[], None] = lambda: None
    kind: str = "redux"
    contribution: Contribution = field(default_factory=Contribution)

    def plan(self, plan: Plan, settings: ImageSettings) -> None:
        plan.prepare.append(EncodeRedux(self.pictures, self.encoder, self.styles, self.place))
        if any(attention_bias(p.use) is not None for p in self.pictures):
            plan.pipeline.adapter.patch_points.require(
                "Redux's strength type attn_bias", "wrong_kind", attention=("joint",),
                fix="Use the strength type multiply with this model",
            )  # fmt: skip
            plan.patches += ModelPatches(wrappers=(prompt_bias_wrapper,))
