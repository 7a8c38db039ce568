"""What a session hands out: small frozen records, never engine objects.

Every :class:`~core.session.session.Session` call returns one of these. They are safe to pass to
another thread (the window receives them through queued signals) and to keep: nothing in them
changes when the session goes on working.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from core.detect.spec import NO_MODEL_DEFAULTS, GenerationDefaults
from core.detect.types import TrainedScale

MAIN_KEY = "main"  # the main slot's key (SlotId.MAIN.key)


@dataclass(frozen=True)
class ComponentInfo:
    role: str  # "diffusion_model" | "text_encoder" | "vae"
    family: str
    dtype: str
    bytes: int
    device: str  # "cpu", "cuda:0" ...
    patched_keys: int = 0
    placed: bool = False  # placed by the memory manager (on the GPU, or a simulated card)
    device_bytes: int = 0  # resident on the device
    streamed_bytes: int = 0  # streamed from RAM at each forward (a partial load)


@dataclass(frozen=True)
class ModelInfo:
    """One loaded file and its components."""

    key: str  # the slot it occupies (SlotId.key): "main", "vae:vae-sd", "text_encoder:clip-l"
    path: Path
    kind: str
    family: str | None
    components: tuple[ComponentInfo, ...]
    load_seconds: float = 0.0
    #: the family's usual generation settings (its record's), what the Generate panel starts from
    defaults: GenerationDefaults = NO_MODEL_DEFAULTS
    #: the most reference pictures its family takes (editing; 0: none)
    references: int = 0
    #: whether its diffusion model reads a control picture of its own (FLUX.1 Canny/Depth [dev])
    control_picture: bool = False

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def is_main(self) -> bool:
        """In the main slot: the model test runs and the LoRA stack work on."""
        return self.key == MAIN_KEY

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.components)


@dataclass(frozen=True, kw_only=True)
class LoraInfo:
    id: str
    path: Path
    base_family: str | None
    model_strength: float
    clip_strength: float
    enabled: bool
    matched: int
    unmatched: int
    skipped: int
    shape_mismatches: int
    family_warning: str | None = None  # set when the LoRA was made for another model
    format: str = ""
    targets: tuple[str, ...] = ()  # components it patches
    trained_scale: tuple[TrainedScale, ...] = ()  # alpha / r from its metadata alone (applied at 1)
    on: str | None = None  # the prompt its model part acts on only (None: everywhere)
    block_weights: str = ""  # LoRA block weights as a tag's ``lbw=`` writes them ("": none)
    #: a control LoRA (FLUX.1 Canny/Depth, DiffSynth's Qwen-Image union): the model reads a control picture
    control: bool = False

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class StackInfo:
    """The LoRA stack of the loaded model, in order. ``baked`` False while a preview runs."""

    model_family: str | None
    loras: tuple[LoraInfo, ...] = ()
    baked: bool = True
    recomputed_keys: int = 0
    applied: str = "baked into the weights"  # where the stack takes effect, in words


@dataclass(frozen=True, kw_only=True)
class RunReport:
    """What a test run measured (the app's Test run panel; ``loadout run`` turns it into its JSON
    report in :mod:`core.run.command`)."""

    steps: int
    width: int
    height: int
    batch: int
    seconds_per_step: float
    total_seconds: float
    device: str
    dtype: str
    peak_rss: int
    peak_vram: int | None
    output: dict[str, object] = field(default_factory=dict)
    resident_bytes: int = 0  # of the diffusion model, on the device during the run
    streamed_bytes_per_step: int = 0  # copied from RAM by the ops layer at each step
    placement: str = ""  # the device it was placed on ("" on the CPU)
    #: activation bytes the inference-memory model predicted for this workload, and the peak the
    #: activation tracker measured during the steps (weights excluded; None when not measured)
    inference_bytes_predicted: int = 0
    inference_bytes_measured: int | None = None


@dataclass(frozen=True)
class SessionEvent:
    """Something the session did, for the memory plot's markers and the event list."""

    time: float  # time.monotonic()
    kind: str
    label: str
    reason: str
