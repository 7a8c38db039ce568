"""Families as data: one :class:`Family` record per model family, in one registry.

Adding a family is adding a record (and, where shapes decide, a small rule function), not another
branch in a long ``if`` chain. The registry refuses duplicate ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from core.detect.keyview import KeyView
from core.detect.spec import DiffusionSpec

Group = Literal["diffusion", "text_encoder", "vae", "controlnet", "upscale", "preprocessor", "image_encoder"]


@dataclass(frozen=True)
class Match:
    """A rule's verdict on a (prefix-stripped) view of keys."""

    family: str
    layout: str = "original"  # naming scheme of the keys: "original" | "diffusers" | ...
    variant: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)  # shape-derived facts
    warnings: tuple[str, ...] = ()
    score: float = 1.0  # how specific the match is; the highest wins among candidates


Rule = Callable[[KeyView], Match | None]


@dataclass(frozen=True)
class Family:
    id: str  # contract id from DESIGN.md, e.g. "sdxl", "flux-dev", "clip-l", "vae-sd"
    group: Group
    title: str  # what a person reads: "Stable Diffusion XL"
    signature: tuple[str, ...] = ()  # keys that must all be present (after prefix stripping)
    rule: Rule | None = None  # decides and reads fields from shapes; None: signature alone
    prefixes: tuple[str, ...] = ()  # where this family's keys live inside an all-in-one checkpoint
    latent_channels: int | None = None
    default_dtype: str = "fp16"
    notes: str = ""
    # presets other layers read from the record (never a table keyed by family id elsewhere):
    latent_format: str = ""  # how the VAE's latents are scaled: "sd1" | "sdxl" | "sd3" | "flux"
    unet_preset: str = ""  # the UNetConfig preset its diffusers layout converts with ("sdxl" ...)
    network_preset: str = ""  # the DiT config preset its diffusers layout converts with ("dev" ...)
    #: its activations overflow fp16 (ComfyUI: supported_inference_dtypes = [bf16, fp32]; LLM text
    #: encoders, trained in bf16, whose MLP activations exceed fp16's range)
    fp16_unsafe: bool = False
    modelspec: str = ""  # ModelSpec architecture id written into saved files
    lora_group: str = ""  # families in one group take each other's LoRAs (same touched shapes)
    #: what generation and memory planning need (None: a family Loadout cannot sample from)
    diffusion: DiffusionSpec | None = None


class Registry:
    def __init__(self) -> None:
        self._families: dict[str, Family] = {}

    def add(self, family: Family) -> Family:
        if family.id in self._families:
            raise ValueError(f"family id {family.id!r} is registered twice")
        self._families[family.id] = family
        return family

    def get(self, family_id: str) -> Family | None:
        return self._families.get(family_id)

    def __iter__(self) -> Iterator[Family]:
        return iter(self._families.values())

    def __contains__(self, family_id: object) -> bool:
        return family_id in self._families

    def group(self, group: Group) -> list[Family]:
        return [f for f in self._families.values() if f.group == group]

    def match(self, view: KeyView, group: Group) -> list[Match]:
        """Every family of ``group`` that matches ``view``, best first."""
        found: list[Match] = []
        for fam in self.group(group):
            if fam.signature and not view.has_all(fam.signature):
                continue
            if fam.rule is not None:
                m = fam.rule(view)
                if m is not None:
                    found.append(m)
            elif fam.signature:
                found.append(Match(fam.id))
        found.sort(key=lambda m: -m.score)
        return found
