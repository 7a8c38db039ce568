"""What detection says about a file: the shapes of the `loadout inspect --json` contract."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal[
    "checkpoint",
    "diffusion_model",
    "vae",
    "text_encoder",
    "lora",
    "controlnet",
    "upscale_model",
    "preprocessor_model",
    "embedding",
    "image_encoder",
    "ip_adapter",
    "style_model",
    "unknown",
]
Role = Literal["diffusion_model", "vae", "text_encoder", "image_encoder"]

#: each kind with its article, as a sentence says it ("is a LoRA", "is an upscale model")
_KIND_PHRASES = {
    "checkpoint": "a checkpoint",
    "diffusion_model": "a diffusion model",
    "vae": "a VAE",
    "text_encoder": "a text encoder",
    "lora": "a LoRA",
    "controlnet": "a ControlNet",
    "upscale_model": "an upscale model",
    "preprocessor_model": "a preprocessor model",
    "embedding": "an embedding",
    "image_encoder": "an image encoder (a vision tower: CLIP, SigLIP)",
    "ip_adapter": "an IP-Adapter",
    "style_model": "a style model",
    "unknown": "a file of a kind Loadout does not recognise",
}


def kind_phrase(kind: str) -> str:
    """``kind`` with its article for a sentence: never "is a unknown"."""
    if kind in _KIND_PHRASES:
        return _KIND_PHRASES[kind]
    word = kind.replace("_", " ")
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


@dataclass(frozen=True)
class Component:
    """One part of a file (a checkpoint has several; a standalone VAE has one)."""

    role: Role
    family: str
    prefix: str  # key prefix inside the file, "" for a standalone file
    tensors: int
    params: int
    bytes: int
    dtype: str  # dominant storage dtype, short form ("fp16", "bf16", "fp8_e4m3fn", "Q4_K", "mixed")
    layout: str = "original"  # key naming of this component (not part of the inspect JSON)
    exclude: tuple[str, ...] = ()  # for prefix "": key prefixes that belong to other components

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "family": self.family,
            "prefix": self.prefix,
            "tensors": self.tensors,
            "params": self.params,
            "bytes": self.bytes,
            "dtype": self.dtype,
        }


@dataclass(frozen=True)
class TrainedScale:
    """The ``alpha / r`` one component of a LoRA was trained at, read from its metadata alone (no
    ``.alpha`` tensors). Applied at 1 as ComfyUI does: this says what strength gives the trained
    effect."""

    component: str  # the metadata's namespace: "transformer" | "unet" | "text_encoder" | ... | ""
    alpha: float
    rank: int
    scale: float  # alpha / rank; alpha / sqrt(rank) with rsLoRA
    rslora: bool = False
    varies: bool = False  # alpha_pattern / rank_pattern give some modules another scale
    dora: bool = False  # DoRA: the scale acts before the norm, so a strength only approximates it

    @property
    def text_encoder(self) -> bool:
        return self.component.startswith("text_encoder")

    def to_json(self) -> dict[str, Any]:
        return {
            "component": self.component,
            "alpha": self.alpha,
            "rank": self.rank,
            "scale": self.scale,
            "rslora": self.rslora,
            "varies": self.varies,
            "dora": self.dora,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> TrainedScale:
        return cls(
            component=str(value["component"]),
            alpha=float(value["alpha"]),
            rank=int(value["rank"]),
            scale=float(value["scale"]),
            rslora=bool(value.get("rslora", False)),
            varies=bool(value.get("varies", False)),
            dora=bool(value.get("dora", False)),
        )


LoraControl = Literal["input", "reference"]


@dataclass(frozen=True)
class LoraSummary:
    format: str  # "kohya" | "diffusers" | "peft" | "lycoris" | "comfyui" | ...
    algorithms: tuple[
        str, ...
    ]  # sorted: "lora", "locon", "loha", "lokr", "dora", "glora", "oft", "boft", "diff"
    rank: int | None  # most common rank; None when the algorithm has none
    modules: int
    targets: dict[str, int]  # {"diffusion_model": n, "text_encoder": n}
    # per component, the scale its metadata says it was trained at (applied at 1, as ComfyUI does)
    trained_scale: tuple[TrainedScale, ...] = ()
    #: how it reads a control picture, as the engine applies it: "input" (a FLUX.1 control LoRA
    #: widens the model's input to take the picture's latent), "reference" (DiffSynth's Qwen-Image
    #: union control LoRA, told by its file name: the picture as a reference latent), None: it reads none
    control: LoraControl | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "algorithms": list(self.algorithms),
            "rank": self.rank,
            "modules": self.modules,
            "targets": dict(self.targets),
            "trained_scale": [t.to_json() for t in self.trained_scale],
            "control": self.control,
        }


@dataclass(frozen=True)
class Detection:
    """The verdict on one file. Pure data: detection never reads tensors."""

    kind: Kind
    family: str | None = None
    variant: str | None = None
    layout: str | None = None  # "original" | "diffusers" | "comfyui" | ...
    components: tuple[Component, ...] = ()
    lora: LoraSummary | None = None
    warnings: tuple[str, ...] = ()
    # Facts read from shapes that later stages use (model channels, depth, ...).
    fields: dict[str, Any] = field(default_factory=dict)
