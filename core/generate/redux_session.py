"""FLUX Redux through a session: the image encoder and the style models loaded once per session
(the shared :class:`core.generate.image_prompts.ImagePromptCache`), the image encoder the
settings' or the one found for the style model (:class:`core.generate.image_prompts.EncoderSearch`),
registered with the placement and placed by the manager, together, when the pass's step runs
(before the prompts are encoded); the pictures read before any of it.

``session_run.generate`` reaches it through :func:`core.generate.workflows.prepare`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from torch import nn

from core.errors import ModelMismatchError
from core.generate.image_prompts import EncoderSearch, ImagePromptCache, image_encoder_for
from core.generate.redux import ReduxPass, bias_room, check_family, parameter_items, read_pictures
from core.generate.request import ImageSettings
from core.loading.image_encoder import LoadedImageEncoder
from core.loading.image_prompts import LoadedStyleModel
from core.memory.manager import NotEnoughMemoryError
from core.session.session import Session

#: ComfyUI's file name for FLUX Redux's image encoder, and where it comes from (said when none is found)
ENCODER_FILE = "sigclip_vision_patch14_384.safetensors"
_EXAMPLE = f"{ENCODER_FILE}, from Comfy-Org/sigclip_vision_384"


def _check_pair(encoder: LoadedImageEncoder, style: LoadedStyleModel) -> None:
    if style.arch.encoder != encoder.family:
        raise ModelMismatchError(
            f"{style.path.name} reads pictures encoded by {style.arch.encoder}, and "
            f"{encoder.path.name} is {encoder.family}",
            why="a style model is trained on one image encoder's hidden states",
            fix=f"Give the image encoder {style.arch.encoder} ({ENCODER_FILE})",
            code="wrong_kind",
        )


def redux_pass(
    session: Session, cache: ImagePromptCache, settings: ImageSettings, search: EncoderSearch, family: str,
    names: dict[str, str], check: Callable[[], None], named: Callable[[Path], str],
) -> ReduxPass | None:  # fmt: skip
    """The Redux pass of these settings (None without Redux pictures), its models loaded, checked
    against each other and registered with the placement; ``names`` gets their manager names."""
    placement = session.placement
    uses = settings.redux
    if not uses:
        return None
    check_family(family)
    pictures = read_pictures(uses, family)  # before any model is read
    loaded = tuple(cache.style(u.path, check) for u in uses)
    encoder = image_encoder_for(
        cache, settings.image_encoder, search, loaded[0].arch.encoder, loaded[0].path,
        "FLUX Redux reads each picture through SigLIP's vision tower before it makes prompt tokens",
        _EXAMPLE, check,
    )  # fmt: skip
    for style in loaded:
        _check_pair(encoder, style)
    models = [encoder.module, *dict.fromkeys(s.module for s in loaded)]
    for model, name, role in _named(encoder, loaded):
        if placement.active and placement.manager.find(model) is None:
            placement.register(model, name)
        names[name] = role

    def place() -> None:
        session.note(
            "phase", "image prompts", "the image encoder and Redux turn the pictures into prompt tokens"
        )
        if not placement.active:
            return
        result = placement.place(models, _room(encoder, loaded))
        if result.refused:
            raise NotEnoughMemoryError(
                f"not enough memory on {placement.describe().label} to encode the Redux pictures",
                why=result.refused[0],
                fix="Free memory: offload or unload other models",
            )

    made = ReduxPass(pictures, encoder, loaded, place)
    made.contribution.files = (encoder.path, *dict.fromkeys(s.path for s in loaded))
    made.contribution.parameters = parameter_items(pictures, named)
    if not placement.manager.settings.headroom_fixed:  # the user's fixed headroom stands
        made.contribution.sample_bytes = bias_room(pictures, settings.final_size)
    return made


def _named(
    encoder: LoadedImageEncoder, styles: tuple[LoadedStyleModel, ...]
) -> list[tuple[nn.Module, str, str]]:
    out = [(encoder.module, f"{encoder.path.stem} image encoder", "image_encoder")]
    out += [(s.module, f"{s.path.stem} style model", "style_model") for s in dict.fromkeys(styles)]
    return out


def _room(encoder: LoadedImageEncoder, styles: tuple[LoadedStyleModel, ...]) -> int:
    """The activations of one picture's encoding, float32: the widest of SigLIP's MLP and attention
    scores, and Redux's 3 x context hidden layer, for each token."""
    config = getattr(encoder.module, "config", None)
    tokens = getattr(config, "positions", 729)
    widths = [getattr(config, "mlp", 4304) * 2, getattr(config, "heads", 16) * tokens]
    widths += [3 * getattr(getattr(s.module, "config", None), "context_width", 4096) * 2 for s in styles]
    return 4 * tokens * max(widths)
