"""FLUX Redux through a session: the image encoder and the style models loaded once per session
(:class:`ReduxCache`), registered with the placement and placed by the manager, together, when the
pass's step runs (before the prompts are encoded); the pictures read before any of it.

``session_run.generate`` reaches it through :func:`core.generate.workflows.prepare`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from core.detect.detector import detect
from core.errors import LoadoutError, ModelMismatchError
from core.files import read_tensor_index
from core.generate.redux import ReduxPass, check_family, parameter_items, read_pictures
from core.generate.request import ImageSettings
from core.loading.image_prompts import (
    LoadedImageEncoder,
    LoadedStyleModel,
    load_image_encoder,
    load_style_model,
)
from core.loading.loader import LoadOptions
from core.memory.manager import NotEnoughMemoryError
from core.session.session import Session

#: ComfyUI's file name and folder for FLUX Redux's image encoder (said when none is given)
ENCODER_FILE = "sigclip_vision_patch14_384.safetensors"


@dataclass
class ReduxCache:
    """The image encoder and style models kept between generations of one session, by path."""

    encoder: LoadedImageEncoder | None = None
    styles: dict[Path, LoadedStyleModel] = field(default_factory=dict)

    def modules(self) -> list[nn.Module]:
        return [m.module for m in (self.encoder, *self.styles.values()) if m is not None]

    def paths(self) -> list[Path]:
        """The files it keeps mapped."""
        return [*([self.encoder.path] if self.encoder is not None else []), *self.styles]

    def drop(self, changed: set[Path]) -> list[tuple[Path, nn.Module]]:
        """Forget the models mapped from ``changed`` files; each (path, module) forgotten."""
        gone = [(p, s.module) for p, s in self.styles.items() if p in changed]
        self.styles = {p: s for p, s in self.styles.items() if p not in changed}
        if self.encoder is not None and self.encoder.path.resolve() in changed:
            gone.append((self.encoder.path, self.encoder.module))
            self.encoder = None
        return gone

    def keep_only(self, encoder: Path | None, styles: set[Path]) -> list[nn.Module]:
        """Forget what is not used now; returns the modules for the placement to release."""
        gone = [s.module for p, s in self.styles.items() if p not in styles]
        self.styles = {p: s for p, s in self.styles.items() if p in styles}
        if self.encoder is not None and self.encoder.path.resolve() != encoder:
            gone.append(self.encoder.module)
            self.encoder = None
        return gone

    def load(self, encoder: Path, styles: list[Path], check: Callable[[], None]) -> None:
        if self.encoder is None:
            self.encoder = load_image_encoder(encoder, LoadOptions(check=check))
        for path in styles:
            if path not in self.styles:
                self.styles[path] = load_style_model(path, LoadOptions(check=check))


def no_encoder() -> LoadoutError:
    return LoadoutError(
        "FLUX Redux needs its image encoder, SigLIP so400m (patch 14, 384), and none was given",
        why="Redux reads each picture through SigLIP's vision tower before it makes prompt tokens",
        fix=f"Give the image encoder file ({ENCODER_FILE}, from Comfy-Org/sigclip_vision_384), or put it "
        "in ComfyUI's models/clip_vision folder (beside the style_models folder of the Redux file)",
        code="no_model",
    )


def _check_pair(encoder: LoadedImageEncoder, style: LoadedStyleModel) -> None:
    if style.record.encoder != encoder.family:
        raise ModelMismatchError(
            f"{style.path.name} reads pictures encoded by {style.record.encoder}, and "
            f"{encoder.path.name} is {encoder.family}",
            why="a style model is trained on one image encoder's hidden states",
            fix=f"Give the image encoder {style.record.encoder} ({ENCODER_FILE})",
            code="wrong_kind",
        )


def redux_pass(
    session: Session, cache: ReduxCache, settings: ImageSettings, family: str, names: dict[str, str],
    check: Callable[[], None], named: Callable[[Path], str],
) -> ReduxPass | None:  # fmt: skip
    """The Redux pass of these settings (None without Redux pictures), its models loaded, checked
    against each other and registered with the placement; ``names`` gets their manager names."""
    placement = session.placement
    uses = settings.redux
    encoder_path = Path(settings.image_encoder).resolve() if settings.image_encoder and uses else None
    for gone in cache.keep_only(encoder_path, {Path(u.path).resolve() for u in uses}):
        placement.release(gone)
    if not uses:
        return None
    check_family(family)
    if encoder_path is None:
        raise no_encoder()
    pictures = read_pictures(uses, family)  # before any model is read
    styles = [Path(u.path).resolve() for u in uses]
    cache.load(encoder_path, styles, check)
    encoder = cache.encoder
    assert encoder is not None
    loaded = tuple(cache.styles[p] for p in styles)
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
    made.contribution.files = (encoder_path, *dict.fromkeys(styles))
    made.contribution.parameters = parameter_items(pictures, named)
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


def encoder_folders(redux: Path, installs: tuple[Path, ...] = ()) -> list[Path]:
    """Where FLUX Redux's image encoder is looked for when none is given: each ComfyUI install's
    ``models/clip_vision``, the ``clip_vision`` folder beside the Redux file's folder (ComfyUI's
    ``models/style_models`` -> ``models/clip_vision``) and the Redux file's own folder."""
    here = Path(redux).resolve().parent
    found = [root / "models" / "clip_vision" for root in installs]
    return list(dict.fromkeys([*found, here.parent / "clip_vision", here]))


def find_image_encoder(family: str, folders: list[Path], known: list[tuple[Path, str | None]]) -> Path | None:
    """The first image encoder of ``family``: among ``known`` (the library's (path, family) of its
    image encoders), then the safetensors files of ``folders`` whose header says so (no data read)."""
    for path, fam in known:
        if fam == family and Path(path).is_file():
            return Path(path)
    for folder in folders:
        for path in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
            try:
                index = read_tensor_index(path)
            except (LoadoutError, OSError):
                continue
            det = detect(index.tensors, {}, path.name)
            if det.kind == "image_encoder" and det.family == family:
                return path
    return None
