"""Generation through a :class:`~core.session.session.Session`: which loaded components take part,
where each phase computes, and how the memory manager places them.

The main slot gives the diffusion model (and a checkpoint's text encoders and VAE); standalone
VAE and text-encoder slots replace the checkpoint's of the same kind, as ComfyUI's VAELoader and
CLIPLoader do. With an active placement (a GPU, or a simulated card) each phase asks the manager
for its models right before it runs: the text encoders for the prompt, the diffusion model for
sampling, the VAE for decoding, so the manager evicts or partially offloads whichever is not
needed now and streams what does not fit. Every decision is an event with its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from core.archs.catalog import codec_for, codec_of
from core.detect.prediction import PREDICTIONS
from core.detect.types import Detection
from core.errors import ModelMismatchError
from core.generate.clip_hooks import lbw_text, session_clip_hooks
from core.generate.events import GeneratedImage, GenerateProgress, GenerateResult, Phase
from core.generate.hashes import FileHashes
from core.generate.hires import upscaler_hook
from core.generate.naming import file_paths, numbered_paths
from core.generate.parameters import GenerationParameters
from core.generate.pipeline import Compute, Hooks, Networks, Pipeline, vae_decode_bytes
from core.generate.preview import Previewer
from core.generate.request import ImageSettings
from core.generate.saving import Made, parameters_for, save_pictures
from core.generate.taesd import find_taesd, load_taesd
from core.generate.workflows import WorkflowState, prepare
from core.loading.loader import LoadedComponent, inspect_for_loading
from core.memory.devices import cpu_device
from core.memory.dtypes import DtypePolicy
from core.memory.inference import Workload, activation_bytes, network_profile
from core.memory.manager import NotEnoughMemoryError
from core.memory.peak import peak_bytes, reset_peak
from core.session.session import Session
from core.session.slots import SlotId
from core.session.words import kind_word
from core.text.cache import ConditioningCache
from core.text.clip_tokenizer import ClipTokenizer
from core.text.conditioning import text_encoders
from core.text.embeddings import NO_EMBEDDINGS, EmbeddingFolders
from core.text.t5_tokenizer import T5Tokenizer
from core.upscale.model import UpscaleModel


@dataclass
class Output:
    """Where pictures go: one file (``-o OUT.png``; a batch adds -2, -3...) or numbered files in a
    folder (the window)."""

    path: Path
    is_folder: bool = False

    #: ``-o FILE`` names the file to (over)write; numbered files never overwrite anything
    replace: bool = True

    def paths(self, seeds: list[int]) -> list[Path]:
        if self.is_folder:
            return numbered_paths(self.path, seeds)
        return file_paths(self.path, len(seeds))

    @property
    def overwrite(self) -> bool:
        return self.replace and not self.is_folder

    def save(
        self,
        pixels: torch.Tensor,
        params: GenerationParameters,
        seed: int,
        check: Callable[[], None],
        progress: Callable[[GenerateProgress], None] = lambda p: None,
    ) -> list[GeneratedImage]:
        """The batch's PNGs, at the names they got (numbered: never over another writer's)."""
        paths = self.paths([seed] * len(pixels))
        return save_pictures(pixels, params, paths, check, progress, overwrite=self.overwrite)


@dataclass
class GenerateState:
    """What stays between generations of one session: caches that make the second picture fast."""

    conditioning: ConditioningCache = field(default_factory=ConditioningCache)
    hashes: FileHashes = field(default_factory=FileHashes)
    previews: dict[int, Previewer] = field(default_factory=dict)  # the VAE's load generation -> previewer
    #: folders where TAESD decoders may be (ComfyUI's models/vae_approx); found ones are used
    taesd_folders: tuple[Path, ...] = ()
    #: what each model file says it predicts ("eps", "v", "v-ztsnr"; None: nothing)
    predictions: dict[Path, str | None] = field(default_factory=dict)
    #: the prediction the user gave, over what the file says (None: the file's, else epsilon)
    prediction: str | None = None
    t5_tokenizer: T5Tokenizer | None = None
    clip_tokenizer: ClipTokenizer | None = None
    upscalers: dict[Path, UpscaleModel] = field(default_factory=dict)  # the hires fix's upscale models
    workflows: WorkflowState = field(default_factory=WorkflowState)  # loaded ControlNets...
    #: where prompts find ``embedding:NAME`` and bare embedding names (the library's folders)
    embeddings: EmbeddingFolders = NO_EMBEDDINGS


@dataclass
class _Parts:
    family: str
    nets: Networks
    objects: dict[Phase, list[object]]
    names: dict[str, str]  # the manager's model names -> role
    model_path: Path
    #: load generations of the text encoders' and the VAE's files (the derived-result caches' keys)
    text_generations: tuple[int, ...] = ()
    vae_generation: int = 0
    #: the file each text encoder was loaded from, by encoder family (LLM tokenizers are read there)
    text_files: dict[str, Path] = field(default_factory=dict)


def file_prediction(det: Detection) -> str | None:
    """What a model file says it predicts: its marker keys or metadata (``fields["prediction"]``),
    else a v-prediction variant named by its metadata or file name (SD2-768-v); None: nothing."""
    stated = det.fields.get("prediction")
    if stated in PREDICTIONS:
        return str(stated)
    return "v" if det.variant == "v-prediction" else None


def _gather(session: Session, predictions: dict[Path, str | None], override: str | None = None) -> _Parts:
    diffusion, d_obj = session.component("diffusion_model")
    family = diffusion.family
    main = session.model(SlotId.MAIN)
    text: dict[str, tuple[LoadedComponent, object, Path]] = {}
    vae: tuple[LoadedComponent, object, Path] | None = None
    generation: dict[str, int] = {}  # component family -> its file's load generation
    for comp, obj in main.pairs():
        if comp.role == "text_encoder":
            text[comp.family] = (comp, obj, main.path)
        elif comp.role == "vae":
            vae = (comp, obj, main.path)
        generation[comp.family] = main.generation
    for slot, loaded in session.loaded.items():
        for comp, obj in loaded.pairs():
            if slot.role == "text_encoder":
                text[comp.family] = (comp, obj, loaded.path)  # a separate file replaces the checkpoint's
                generation[comp.family] = loaded.generation
            elif slot.role == "vae":
                vae = (comp, obj, loaded.path)
                generation[comp.family] = loaded.generation
    if vae is None or codec_of(vae[0].module) is None:
        raise ModelMismatchError(
            f"{main.path.name} has no VAE, and none is loaded",
            why="the picture is decoded from latents by a VAE",
            fix="Load a VAE file (ComfyUI's models/vae) as well",
            code="missing_vae",
        )
    if main.path not in predictions:  # the file's v_pred/ztsnr keys, its metadata or its name
        predictions[main.path] = file_prediction(inspect_for_loading(main.path)[1])
    prediction = override or predictions[main.path] or "eps"
    names = {f"{main.path.stem} {kind_word('diffusion_model', family)}": "diffusion_model"}
    for comp, _, path in [*text.values(), vae]:
        names[f"{path.stem} {kind_word(comp.role, comp.family)}"] = comp.role
    nets = Networks(
        family=family,
        diffusion=diffusion.module,
        text=text_encoders([(c.family, c.module) for c, _, _ in text.values()]),
        vae=vae[0].module,
        v_prediction=prediction != "eps",
        zero_terminal_snr=prediction == "v-ztsnr",
    )
    objects: dict[Phase, list[object]] = {
        "text_encode": [obj for _, obj, _ in text.values()],
        "sample": [d_obj],
        "decode": [vae[1]],
    }
    texts = tuple(generation[f] for f in text)
    files = {f: path for f, (_, _, path) in text.items()}
    return _Parts(family, nets, objects, names, main.path, texts, generation[vae[0].family], files)


def _compute(session: Session, family: str) -> Compute:
    placement = session.placement
    if not placement.active:
        return Compute()
    device = placement.accelerator or cpu_device(0)
    policy = DtypePolicy()
    target = torch.device(placement.manager.device)

    def pick(role: str) -> torch.dtype:
        return policy.storage_and_compute(role, family, None, device).compute

    # the load's decision where the settings chose one: fp8 matmul runs its activations in 16 bits
    chosen = session.model(SlotId.MAIN).dtype_choice
    diffusion = chosen.activation_dtype if chosen is not None else pick("diffusion_model")
    return Compute(target, diffusion, torch.float32, pick("vae"))


def _activation_needs(
    parts: _Parts, settings: ImageSettings, compute: Compute, cfg: float
) -> dict[Phase, int]:
    """Room each phase asks the manager to keep for its activations: sampling's from the measured
    inference-memory model for this size and batch (doubled when CFG runs the negative prompt in
    the same forward), decoding's from the VAE's shape (:func:`vae_decode_bytes`)."""
    batch = settings.batch * (1 if cfg == 1.0 else 2)
    attention = "cuda_flash" if compute.device.type == "cuda" else "cpu_flash"
    size = torch.empty((), dtype=compute.diffusion_dtype).element_size()
    work = Workload(settings.width, settings.height, batch, size, attention)
    profile, width = network_profile(parts.family, parts.nets.diffusion)
    vae = vae_decode_bytes(parts.nets.vae, settings.batch, settings.height, settings.width, compute.vae_dtype)
    return {"sample": activation_bytes(profile, work, width), "decode": vae}


def _tiled_decode_bytes(parts: _Parts, settings: ImageSettings, compute: Compute) -> int:
    """Room a decode in tiles needs: one tile's activations (the pipeline decodes in tiles when the
    device has no room for the whole picture's, as ComfyUI falls back to tiles)."""
    vae = parts.nets.vae
    codec = codec_of(vae)
    assert codec is not None  # checked when the parts were gathered
    return codec.tiled_decode_bytes(vae, settings.batch, settings.height, settings.width, compute.vae_dtype)


@dataclass
class PhasePlacer:
    """``hooks.place``: notes each phase as a session event and, with an active placement, asks the
    manager for that phase's models with room for its activations (``need``)."""

    session: Session
    objects: dict[Phase, list[object]]
    need: dict[Phase, int]
    words: dict[str, tuple[str, str]]
    hires: bool = False  # the sampling phases are "sample 1" and "sample 2"
    passes: int = 0
    #: a smaller room a phase can do with when its full need is refused (decoding in tiles)
    fallback: dict[Phase, tuple[int, str]] = field(default_factory=dict)

    def __call__(self, phase: Phase) -> None:
        if phase == "sample" and self.hires:
            self.passes += 1
            self.session.note("phase", f"sample {self.passes}", f"pass {self.passes} of the hires fix")
        elif phase in self.words:
            self.session.note("phase", *self.words[phase])
        placement = self.session.placement
        if not placement.active or not self.objects.get(phase):
            return
        result = placement.place(self.objects[phase], self.need.get(phase, 0))
        if result.refused and phase in self.fallback:
            need, words = self.fallback[phase]
            result = placement.place(self.objects[phase], need)
            if not result.refused:
                self.session.note("phase", phase, words)
        if result.refused:
            raise NotEnoughMemoryError(
                f"not enough memory on {placement.describe().label} to {phase.replace('_', ' ')}",
                why=result.refused[0],
                fix="Use a smaller size or batch, or free memory: offload or unload other models",
            )

    def free(self) -> int | None:
        """Bytes free on the device for the VAE's activations (None: nothing is placed)."""
        placement = self.session.placement
        if not placement.active or placement.probe is None:
            return None
        return max(0, placement.probe.free() - placement.manager.settings.reserve_bytes)


def _placer(session: Session, parts: _Parts, settings: ImageSettings, pipeline: Pipeline) -> PhasePlacer:
    plan = session.placement.manager.settings
    # the largest picture of the generation sizes the activations (the hires pass's, when there is one)
    stride = pipeline.latent_format.downscale
    hires = settings.hires
    width, height = (
        (settings.width, settings.height)
        if hires is None
        else hires.target_size(settings.width, settings.height, stride)
    )
    sized = replace(settings, width=width, height=height, hires=None)
    need = (
        {}
        if plan.headroom_fixed
        else _activation_needs(parts, sized, pipeline.compute, pipeline.cfg(settings))
    )
    words = {"text_encode": ("encode", "the text encoders turn the prompts into conditioning"),
             "sample": ("sample", f"{settings.sampling.steps} steps of {settings.sampling.sampler}"),
             "upscale": ("upscale", "the hires fix makes the first pass's picture larger"),
             "decode": ("decode", "the VAE turns the latent into pixels")}  # fmt: skip
    fallback: dict[Phase, tuple[int, str]] = {}
    if need:
        tiles = _tiled_decode_bytes(parts, sized, pipeline.compute)
        if tiles < need["decode"]:
            fallback["decode"] = (tiles, "no room for a whole decode: the VAE decodes in tiles")
    return PhasePlacer(
        session, parts.objects, need, words, hires=settings.hires is not None, fallback=fallback
    )


def _preview(state: GenerateState, parts: _Parts) -> Previewer:
    preview = state.previews.get(parts.vae_generation)
    if preview is None:
        taesd = find_taesd(parts.family, state.taesd_folders)
        fitted = load_taesd(taesd) if taesd else codec_for(parts.family).preview(parts.nets.vae)
        preview = state.previews[parts.vae_generation] = fitted
    return preview


def _pipeline(session: Session, parts: _Parts, state: GenerateState, dtype: torch.dtype | None) -> Pipeline:
    compute = _compute(session, parts.family)
    if dtype is not None:  # the user's choice for the diffusion model (--dtype)
        compute = replace(compute, diffusion_dtype=dtype)
    if state.clip_tokenizer is None:  # built once per session: 0.3 s of vocabulary parsing
        state.clip_tokenizer = ClipTokenizer()
    return Pipeline(
        parts.nets, compute, clip_tokenizer=state.clip_tokenizer, t5_tokenizer=state.t5_tokenizer,
        cache=state.conditioning, text_files=parts.text_files, embeddings=state.embeddings,
    )  # fmt: skip


def generate(
    session: Session,
    settings: ImageSettings,
    output: Output,
    *,
    state: GenerateState,
    progress: Callable[[GenerateProgress], None],
    check: Callable[[], None],
    init: np.ndarray | None = None,
    dtype: torch.dtype | None = None,
) -> GenerateResult:
    """Make ``settings.batch`` pictures with the loaded models and save them (see the module notes)."""
    parts = _gather(session, state.predictions, state.prediction)
    pipeline = _pipeline(session, parts, state, dtype)
    placement = session.placement
    started = placement.events.clock()
    placer = _placer(session, parts, settings, pipeline)
    entries = list(session.loras.stack.entries.values()) if session.loras.stack else []
    clip_hooks = session_clip_hooks(session.loras, parts.text_generations)
    hooks = Hooks(place=placer, check=check, progress=progress, text_key=clip_hooks.stack_key(),
                  free_bytes=placer.free, preview=_preview(state, parts), clip_hooks=clip_hooks)  # fmt: skip
    if settings.hires is not None and settings.hires.model is not None:
        model = settings.hires.model
        hooks.upscale = upscaler_hook(placement, state.upscalers, model, check, progress, parts.names)
    workflow = prepare(session, state.workflows, settings, parts, pipeline, hooks, state.hashes)
    if "sample" in placer.need:
        placer.need["sample"] += workflow.sample_bytes
    device = pipeline.compute.device
    reset_peak(device)
    try:
        with clip_hooks:  # after: LoRAs on one prompt have their text-encoder parts back everywhere
            pixels, timings, notes = pipeline.run(settings, hooks, init, workflow.passes)
    finally:
        workflow.finish()  # scheduled LoRAs back at their own strengths (also after a stop)
        placement.settle()  # copies fetched ahead for a next step are freed (also on a stop)
        session.note("phase_end", "done", "the generation's phases are over")
    progress(GenerateProgress("save", 0, len(pixels)))
    guidance = _guidance(settings.sampling.guidance, pipeline.spec.defaults.guidance)
    made = Made(
        cfg=pipeline.cfg(settings), model_path=parts.model_path, img2img=init is not None, guidance=guidance,
        loras=tuple((e.path, e.model_strength, e.clip_strength, lbw_text(e), e.on) for e in entries
                    if e.enabled),
        embeddings=tuple((name, Path(path)) for name, path in pipeline.used_embeddings.items()),
    )  # fmt: skip
    notes = (*notes, *pipeline.text_notes)
    size = (pixels.shape[3], pixels.shape[2])
    if settings.hires is not None:  # A1111's Size is the first pass's (before the hires fix)
        size = _first_pass_size(settings, init, pipeline.latent_format.downscale)
    params = replace(parameters_for(settings, made, size, state.hashes, check), hires=settings.hires)
    params = replace(params, extra=dict(workflow.parameters))  # ControlNet, refiner (A1111's items)
    images = output.save(pixels, params, settings.sampling.seed, check, progress)
    events = tuple(
        {**e.to_json(), "role": parts.names.get(e.model, "")}
        for e in placement.events.events()
        if e.timestamp >= started
    )
    return GenerateResult(
        tuple(images), settings.sampling.seed, timings.seconds_per_step, timings.as_dict(),
        peak_bytes(device), events, notes,
    )  # fmt: skip


def _first_pass_size(settings: ImageSettings, init: np.ndarray | None, stride: int) -> tuple[int, int]:
    """(width, height) of the first pass: the settings', or a starting picture's (grown when
    outpainting) cropped to multiples of the VAE's ``stride`` (8, FLUX.2's 16) as VAEEncode does."""
    if init is None:
        return settings.width, settings.height
    w, h = init.shape[1], init.shape[0]
    if settings.outpaint is not None:
        w, h = settings.outpaint.grown(w, h)
    return w // stride * stride, h // stride * stride


def _guidance(chosen: float | None, usual: float | None) -> float | None:
    """The distilled guidance written into the parameters: only for a family that takes one."""
    if usual is None:
        return None
    return chosen if chosen is not None else usual
