"""The typed slots a session keeps loaded models in, and how each kind of file is loaded.

A session holds one *main* model (a checkpoint or a diffusion model: the one test runs and LoRA
stacks work on) and any number of standalone VAEs and text encoders, one per family. A slot is a
:class:`SlotId`, not a string: ``SlotId.MAIN``, ``SlotId.of("vae", "vae-sd")``. Its ``key`` is the
stable text form snapshots carry ("main", "vae:vae-sd") and :meth:`SlotId.parse` reads it back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, TypeAlias, get_args

from core.detect.types import kind_phrase
from core.errors import LoadoutError
from core.loading.loader import (
    LoadedComponent,
    LoadOptions,
    load_checkpoint,
    load_diffusion_model,
    load_text_encoder,
    load_vae,
)
from core.memory.dtypes import DtypeChoice
from core.session.snapshots import MAIN_KEY

LoadKind: TypeAlias = Literal["checkpoint", "diffusion_model", "vae", "text_encoder"]
SlotRole: TypeAlias = Literal["main", "vae", "text_encoder"]


@dataclass(frozen=True)
class SlotId:
    role: SlotRole
    family: str = ""  # the standalone component's family; "" for the main slot

    MAIN: ClassVar[SlotId]

    @classmethod
    def for_load(cls, kind: LoadKind, family: str) -> SlotId:
        if kind == "vae":
            return cls("vae", family)
        if kind == "text_encoder":
            return cls("text_encoder", family)
        return cls.MAIN

    @classmethod
    def parse(cls, key: str) -> SlotId:
        role, _, family = key.partition(":")
        if key == MAIN_KEY:
            return cls.MAIN
        if role in ("vae", "text_encoder") and family:
            return cls("vae" if role == "vae" else "text_encoder", family)
        raise LoadoutError(f"{key!r} names no model slot", fix="Pick one in Loaded models", code="not_loaded")

    @property
    def key(self) -> str:
        return MAIN_KEY if self.role == "main" else f"{self.role}:{self.family}"


SlotId.MAIN = SlotId("main")


def _checkpoint_components(path: Path, options: LoadOptions) -> list[LoadedComponent]:
    return load_checkpoint(path, options).components


@dataclass(frozen=True)
class Loaders:
    """How each kind of file is loaded (tests wrap these, e.g. to simulate a slow disk)."""

    checkpoint: Callable[[Path, LoadOptions], list[LoadedComponent]] = _checkpoint_components
    diffusion_model: Callable[[Path, LoadOptions], LoadedComponent] = load_diffusion_model
    vae: Callable[[Path, LoadOptions], LoadedComponent] = load_vae
    text_encoder: Callable[[Path, LoadOptions], LoadedComponent] = load_text_encoder

    def load(self, kind: LoadKind, path: Path, options: LoadOptions) -> list[LoadedComponent]:
        """The components of ``path`` loaded as ``kind``."""
        if kind == "checkpoint":
            return self.checkpoint(path, options)
        if kind == "diffusion_model":
            return [self.diffusion_model(path, options)]
        if kind == "vae":
            return [self.vae(path, options)]
        return [self.text_encoder(path, options)]


def refuse_unloadable(path: Path, kind: str) -> LoadKind:
    """``kind`` as a :data:`LoadKind`, or the error an artist reads for a file that does not load alone."""
    for loadable in get_args(LoadKind):
        if kind == loadable:
            return loadable  # type: ignore[no-any-return]
    raise LoadoutError(
        f"{path.name} is {kind_phrase(kind)}, which cannot be loaded on its own",
        why="only checkpoints, diffusion models, VAEs and text encoders load as models",
        fix="Add a LoRA to the LoRA stack of a loaded model instead" if kind == "lora" else "",
        code="not_loadable",
    )


@dataclass
class LoadedModel:
    """One loaded file in its slot: its components and, per component, what the memory manager
    tracks for it (the LoRA stack's patcher for patchable components, else the module)."""

    slot: SlotId
    path: Path
    kind: LoadKind
    components: list[LoadedComponent]
    seconds: float
    managed: list[object] = field(default_factory=list)
    #: the diffusion model's dtype decision, made where the settings asked for a compute dtype
    #: (fp8 matmul); generation runs its activations in ``activation_dtype``
    dtype_choice: DtypeChoice | None = None
    #: which load this is in its session (1, 2, ...: never reused, unlike ``id()`` of a freed
    #: module): what caches of derived results (conditionings, previews) are keyed by
    generation: int = 0

    @property
    def family(self) -> str | None:
        diffusion = [c for c in self.components if c.role == "diffusion_model"]
        return (diffusion or self.components)[0].family if self.components else None

    def pairs(self, role: str | None = None) -> list[tuple[LoadedComponent, object]]:
        """(component, managed object), all or those with ``role``."""
        both = zip(self.components, self.managed, strict=True)
        return [(c, obj) for c, obj in both if role is None or c.role == role]
