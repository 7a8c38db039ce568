"""The passes that need models beyond the base's, or files read for the picture's parameters, made
through a session: an edit's reference pictures (read and hashed), the image prompts (IP-Adapter:
:mod:`core.generate.image_prompts`; FLUX Redux: :mod:`core.generate.redux_session`; their files
loaded once per session in one cache), the ControlNets (loaded once per session, placed with the
diffusion model for the "sample" phase) and the SDXL refiner
(loaded once per session, its text encoder and UNet placed for their own phases), with the PNG
parameters that name what was used.

``session_run.generate`` calls :func:`prepare` once its pipeline and hooks exist and hands the
passes to :meth:`Pipeline.run <core.generate.pipeline.Pipeline.run>`, which adds the ones the
settings alone ask for (:mod:`core.generate.workflow_passes`) and runs the plan
(:mod:`core.generate.passes`). Nothing here changes the pipeline.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch

from core.detect.catalog import REFINER_FAMILY, refiner_follows
from core.errors import ModelMismatchError
from core.generate import controlnet as cn
from core.generate.control_picture import control_picture_pass
from core.generate.events import Phase
from core.generate.hashes import FileHashes
from core.generate.image_prompt_passes import image_prompt_passes
from core.generate.image_prompts import EncoderSearch, ImagePromptCache
from core.generate.lora_schedule import LoraSchedulePass
from core.generate.outpaint_settings import outpaint_parameters
from core.generate.passes import Pass
from core.generate.pipeline import Hooks, Pipeline
from core.generate.references import ReferencePass, activation_room, convention_for, read_references
from core.generate.refiner import (
    LoadedRefiner,
    RefinerPass,
    load_refiner,
    refiner_hooks,
    refiner_networks,
)
from core.generate.request import ImageSettings
from core.generate.workflow_request import RefinerUse
from core.memory.inference import Workload, activation_bytes, network_profile
from core.memory.manager import NotEnoughMemoryError
from core.preprocess import find_preprocessor
from core.preprocess.placed import PreprocessorModels, let_go, library_models, model_files, model_run
from core.preprocess.registry import ModelRun
from core.session.session import Session
from core.session.words import kind_word


class Parts(Protocol):
    family: str
    objects: dict[Phase, list[object]]  # phase -> the models it places
    names: dict[str, str]  # the manager's model names -> role


@dataclass
class WorkflowState:
    """What the workflows keep between generations of one session."""

    controlnets: cn.ControlNetCache = field(default_factory=cn.ControlNetCache)
    preprocessors: PreprocessorModels = field(default_factory=PreprocessorModels)
    image_prompts: ImagePromptCache = field(default_factory=ImagePromptCache)
    refiner: LoadedRefiner | None = None
    #: where image prompts' encoders are looked for when the settings name none (the generator's
    #: library and ComfyUI installs; beside the files that need them in any case)
    encoder_search: EncoderSearch = field(default_factory=EncoderSearch)


@dataclass
class Prepared:
    passes: list[Pass] = field(default_factory=list)
    parameters: dict[str, str] = field(default_factory=dict)  # A1111 infotext items
    #: activation room the "sample" phase needs beyond the UNet's (the ControlNets' residuals)
    sample_bytes: int = 0

    def finish(self) -> None:
        """After the run (also after a stop): what the passes changed in the session put back."""
        for p in self.passes:
            if isinstance(p, LoraSchedulePass):
                p.finish()


def _num(v: float) -> str:
    return f"{v:g}"


def controlnet_parameter(
    index: int,
    name: str,
    use_strength: float,
    start: float,
    end: float,
    module: str | None = None,
    control_type: str | None = None,
) -> tuple[str, str]:
    """A1111's sd-webui-controlnet infotext item: ``ControlNet 0: "Module: canny, Model: ..., ..."``
    (``Module: none``: the hint was given ready-made); a union net's type as ``Control Type``."""
    text = (
        f"Module: {module or 'none'}, Model: {name}, Weight: {_num(use_strength)}, "
        f"Resize Mode: Crop and Resize, Guidance Start: {_num(start)}, Guidance End: {_num(end)}"
    )
    if control_type:
        text += f", Control Type: {control_type}"
    return f"ControlNet {index}", text


def _controlnets(
    session: Session, state: WorkflowState, settings: ImageSettings, parts: Parts, pipeline: Pipeline,
    check: Callable[[], None], named: Callable[[Path, int], str],
) -> cn.ControlNetPass | None:  # fmt: skip
    placement = session.placement
    uses = settings.controlnets
    wanted = {Path(u.path).resolve() for u in uses}
    for gone in state.controlnets.keep_only(wanted):
        placement.release(gone.module)
    if not uses:
        return None
    loaded = [state.controlnets.get(u.path, check) for u in uses]
    for use, net in zip(uses, loaded, strict=True):
        cn.check_use(use, net, parts.family, settings)
        name = f"{net.path.stem} ControlNet"
        if placement.active and placement.manager.find(net.module) is None:
            placement.register(net.module, name)
        parts.names[name] = "controlnet"
    made = cn.ControlNetPass(
        cn.applied(uses, loaded, pipeline.sampling, _preprocessor_run(session, state, settings, check))
    )
    made.contribution.models = {"sample": [net.module for net in loaded]}  # placed with the UNet
    made.contribution.files = tuple(net.path for net in loaded)
    made.contribution.parameters = dict(
        # sd-webui-controlnet names a model with the first 8 hex digits of its sha256
        controlnet_parameter(
            i, named(Path(u.path), 8), u.strength, u.start, u.end, u.preprocessor, u.control_type
        )
        for i, u in enumerate(uses)
    )
    stack = made.stack.nets
    if stack:
        batch = settings.batch * (1 if pipeline.cfg(settings) == 1.0 else 2)
        size = torch.empty((), dtype=pipeline.compute.diffusion_dtype).element_size()
        w, h = settings.final_size  # the largest latent the residuals are made for
        f = pipeline.latent_format.downscale
        one = cn.residual_bytes(stack[0].module, batch, h // f, w // f, size)
        made.contribution.sample_bytes = one * min(len(stack), 2)
    return made


def _preprocessor_run(
    session: Session, state: WorkflowState, settings: ImageSettings, check: Callable[[], None]
) -> ModelRun | None:
    """The runner of the model preprocessors these ControlNets use (None when none does); the
    models no longer used are let go."""
    uses = (*settings.controlnets, settings.control_picture)
    names = [u.preprocessor for u in uses if u is not None and u.preprocessor]
    records = [find_preprocessor(name) for name in names]
    records = [r for r in records if r.model_family is not None]
    library = library_models(session.library.index, records)
    files = model_files(records, settings.preprocessor_models, library) if records else {}
    for gone in state.preprocessors.keep_only(files.values()):
        let_go(session.placement, gone)
    return model_run(session.placement, state.preprocessors, files, check) if records else None


def prepare(
    session: Session,
    state: WorkflowState,
    settings: ImageSettings,
    parts: Parts,
    pipeline: Pipeline,
    hooks: Hooks,
    hashes: FileHashes | None = None,
) -> Prepared:
    """This generation's reference, ControlNet and refiner passes, their models registered in ``parts`` (see
    the module notes); ``hashes`` gives the short hashes A1111 writes beside their names."""

    def named(path: Path, digits: int) -> str:
        return f"{path.stem} [{hashes.model_hash(path)[:digits]}]" if hashes is not None else path.stem

    passes: list[Pass] = []
    if settings.references:  # read and checked before any model is placed
        pictures = read_references(settings.references, parts.family)
        rule = convention_for(parts.family, len(pictures), settings.reference_own_size)
        made = ReferencePass(pictures, rule)
        made.contribution.sample_bytes = _reference_room(session, settings, pipeline, made)
        passes.append(made)
    passes += image_prompt_passes(
        session, state.image_prompts, state.encoder_search, settings, parts.family, parts.names,
        pipeline.sampling, hooks.check, named,
    )  # fmt: skip
    run_model = _preprocessor_run(session, state, settings, hooks.check) if settings.control_picture else None
    picture = control_picture_pass(settings, pipeline, session.loras.stack, parts.family, run_model)
    if isinstance(picture, ReferencePass):  # a control LoRA's control picture: reference tokens
        picture.contribution.sample_bytes = _reference_room(session, settings, pipeline, picture)
    passes += [picture] if picture is not None else []
    control = _controlnets(session, state, settings, parts, pipeline, hooks.check, named)
    refiner = _refiner(session, state, settings, parts, pipeline, hooks)
    if control is not None:
        passes.append(control)
    hooked = _schedules(session, settings)
    if hooked is not None:
        passes.append(hooked)
    if refiner is not None:
        refiner.contribution.parameters = {
            "Refiner": named(refiner.use.path, 10),  # A1111: the AutoV2 short hash
            "Refiner switch at": _num(refiner.use.switch),
        }
        passes.append(refiner)
    out = Prepared(passes)
    if settings.outpaint is not None:  # its pass needs no model: only its PNG items come from here
        out.parameters |= outpaint_parameters(settings.outpaint)
    for p in passes:
        out.parameters |= p.contribution.parameters
        out.sample_bytes += p.contribution.sample_bytes
        for phase, models in p.contribution.models.items():
            placed = parts.objects.get(phase)  # type: ignore[call-overload]
            if placed is None:
                continue  # a phase the pass places itself (the refiner's)
            for model in models:
                if model not in placed:  # the same ControlNet twice is placed once
                    placed.append(model)
    return out


def _schedules(session: Session, settings: ImageSettings) -> LoraSchedulePass | None:
    """The LoRA hooks of this generation: the settings' schedules and the stack's LoRAs that act
    on one prompt only (None when there are neither)."""
    stack = session.loras.stack
    enabled = [e for e in stack.entries.values() if e.enabled] if stack else []
    targets = {e.id: e.on for e in enabled if e.on is not None}
    if not settings.lora_schedules and not targets:
        return None
    strengths = {e.id: e.model_strength for e in enabled}

    def set_strength(lora: str, strength: float) -> None:
        session.loras.set_strength(lora, strength, None, bake=True)

    return LoraSchedulePass(settings.lora_schedules, strengths, set_strength, targets)


def _workload(settings: ImageSettings, pipeline: Pipeline) -> Workload:
    """The last sampler's step shape (the hires pass's size), as the session plans the base's."""
    compute = pipeline.compute
    batch = settings.batch * (1 if pipeline.cfg(settings) == 1.0 else 2)
    attention = "cuda_flash" if compute.device.type == "cuda" else "cpu_flash"
    size = torch.empty((), dtype=compute.diffusion_dtype).element_size()
    w, h = settings.final_size
    return Workload(w, h, batch, size, attention)


def _reference_room(
    session: Session, settings: ImageSettings, pipeline: Pipeline, made: ReferencePass
) -> int:
    """Room for the reference tokens in each step (0 when the user fixed the headroom)."""
    if session.placement.manager.settings.headroom_fixed:
        return 0
    profile, width = network_profile(pipeline.nets.family, pipeline.nets.diffusion)
    return activation_room(profile, width, _workload(settings, pipeline), made.pictures, made.rule)


def _refine_activations(
    session: Session, settings: ImageSettings, pipeline: Pipeline, unets: list[object]
) -> int:
    """Room for the refiner's steps, as session_run asks it for the base's: the measured
    inference-memory model at this size and batch (0 when the user fixed the headroom)."""
    plan = session.placement.manager.settings
    if plan.headroom_fixed or not unets:
        return 0
    compute = pipeline.compute
    batch = settings.batch * (1 if pipeline.cfg(settings) == 1.0 else 2)
    attention = "cuda_flash" if compute.device.type == "cuda" else "cpu_flash"
    size = torch.empty((), dtype=compute.diffusion_dtype).element_size()
    profile, width = network_profile(REFINER_FAMILY, unets[0])
    w, h = settings.final_size  # the refiner finishes the last pass: the hires one's size
    return activation_bytes(profile, Workload(w, h, batch, size, attention), width)


def _refiner(
    session: Session,
    state: WorkflowState,
    settings: ImageSettings,
    parts: Parts,
    pipeline: Pipeline,
    hooks: Hooks,
) -> RefinerPass | None:
    placement = session.placement
    use = settings.refiner
    old = state.refiner
    if old is not None and (use is None or Path(use.path).resolve() != old.path):
        for obj in old.objects:
            placement.release(obj)
        state.refiner = None
    if use is None:
        return None
    refiner = _loaded_refiner(state, use, parts.family, hooks, session.next_generation)
    by_phase = _refiner_phases(session, refiner, parts)
    words = {"refine_encode": ("refine encode", "the refiner's CLIP-G encodes the prompts"),
             "refine": ("refine", "the refiner finishes the steps after the switch")}  # fmt: skip

    need = {"refine": _refine_activations(session, settings, pipeline, by_phase["refine"])}

    def place(phase: str) -> None:
        session.note("phase", *words[phase])
        if not placement.active:
            return
        result = placement.place(by_phase[phase], need.get(phase, 0))
        if result.refused:
            raise NotEnoughMemoryError(
                f"not enough memory on {placement.describe().label} to {words[phase][0]}",
                why=result.refused[0],
                fix="Use a smaller size or batch, or free memory: offload or unload other models",
            )

    nets = refiner_networks(refiner, pipeline.nets)
    rpipe = Pipeline(
        nets, pipeline.compute, clip_tokenizer=pipeline._clip_tok, cache=pipeline.cache,
        embeddings=pipeline.embeddings,
    )  # fmt: skip
    # the refiner's prompts name the same embeddings: one picture's parameters and notes
    rpipe.used_embeddings, rpipe.text_notes = pipeline.used_embeddings, pipeline.text_notes
    rhooks = refiner_hooks(hooks, place, ("refiner", refiner.generation))
    made = RefinerPass(rpipe, rhooks, use)
    made.contribution.files = (refiner.path,)
    made.contribution.models = dict(by_phase)
    return made


def _loaded_refiner(
    state: WorkflowState, use: RefinerUse, family: str, hooks: Hooks, generation: Callable[[], int]
) -> LoadedRefiner:
    """The refiner the settings name, loaded once per session; refused after a non-SDXL model."""
    if not refiner_follows(family):
        raise ModelMismatchError(
            f"the SDXL refiner follows an SDXL base model, and the model is {family}",
            why="the hand-off passes the base's latent with its leftover noise to the refiner",
            fix="Load an SDXL checkpoint, or leave the refiner out",
            code="wrong_refiner",
        )
    if state.refiner is None:
        state.refiner = load_refiner(Path(use.path).resolve(), hooks.check, generation())
    return state.refiner


def _refiner_phases(session: Session, refiner: LoadedRefiner, parts: Parts) -> dict[str, list[object]]:
    """The refiner's models registered with the placement (once) and named in ``parts``, by the
    phase that places them: its text encoder for "refine_encode", its UNet for "refine"."""
    placement = session.placement
    by_phase: dict[str, list[object]] = {"refine_encode": [], "refine": []}
    for comp in refiner.bundle.components:
        name = f"{refiner.path.stem} {kind_word(comp.role, comp.family)}"
        if placement.active and placement.manager.find(comp.module) is None:
            placement.register(comp.module, name)
        parts.names[name] = comp.role
        if comp.role == "text_encoder":
            by_phase["refine_encode"].append(comp.module)
        elif comp.role == "diffusion_model":
            by_phase["refine"].append(comp.module)
    return by_phase


@dataclass(frozen=True)
class ControlNetParameters:
    """One ControlNet as a picture's parameters name it (A1111's ``ControlNet N`` item)."""

    model: str
    weight: float
    start: float
    end: float
    module: str = "none"  # the preprocessor that made the hint ("none": given ready-made)
    control_type: str | None = None  # a union ControlNet's type


def controlnets_in(extra: dict[str, str]) -> tuple[ControlNetParameters, ...]:
    """The ``ControlNet 0``, ``ControlNet 1``... items of an infotext's extra keys, in order;
    items that do not read as A1111's form are left out."""
    found: list[tuple[int, ControlNetParameters]] = []
    for key, text in extra.items():
        if not key.startswith("ControlNet ") or not key[11:].isdigit():
            continue
        fields = dict(part.split(":", 1) for part in text.split(", ") if ":" in part)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        try:
            item = ControlNetParameters(
                re.sub(r"\s*\[[0-9a-fA-F]+\]$", "", fields["Model"]),  # the name without its hash
                float(fields.get("Weight", "1")),
                float(fields.get("Guidance Start", "0")),
                float(fields.get("Guidance End", "1")),
                fields.get("Module", "none") or "none",
                fields.get("Control Type") or None,
            )
        except (KeyError, ValueError):
            continue
        found.append((int(key[11:]), item))
    return tuple(item for _, item in sorted(found, key=lambda p: p[0]))
