"""``loadout generate``: load the files, add the LoRAs, make the pictures, save them.

The same :class:`~core.session.session.Session` the window uses does the work, placing on the
device asked for (``--vram-limit`` simulates a card of that size, on the CPU too), so the command
line shows exactly what the window would do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from core.detect.catalog import generation_defaults
from core.errors import LoadoutError, ModelMismatchError
from core.files.destination import check_output_file, check_output_folder
from core.generate.events import GenerateProgress, GenerateResult, LoraMatch
from core.generate.generator import Generator, needs_t5
from core.generate.naming import file_paths
from core.generate.pictures import read_picture
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, with_family_defaults
from core.generate.session_run import Output
from core.loading.assign import interrupt_check
from core.session.compose import headless_session, load_main
from core.session.dtype_choice import compute_override
from core.session.session import Session
from core.session.slots import SlotId
from core.text.t5_tokenizer import T5Tokenizer, T5TokenizerSearch

__all__ = [
    "comfyui_installs",
    "generate_files",
    "generator_for",
    "load_models",
    "lora_matches",
    "open_request",
    "read_picture",
]


def comfyui_installs(paths: Iterable[Path]) -> tuple[Path, ...]:
    """ComfyUI installs that hold ``paths`` (a model under ``<install>/models/...``), where its T5
    tokenizer may be found."""
    found: dict[Path, None] = {}
    for path in paths:
        for parent in Path(path).resolve().parents:
            if (parent / "comfy" / "text_encoders").is_dir():
                found[parent] = None
                break
    return tuple(found)


def load_models(session: Session, models: ModelFiles, check: Callable[[], None]) -> str | None:
    if models.checkpoint is not None and models.diffusion_model is not None:
        raise LoadoutError(
            "both a checkpoint and a diffusion model were given",
            why="the diffusion model would replace the checkpoint's, and only its text encoders and VAE "
            "would be used",
            fix="Give the checkpoint alone, or a diffusion model with its text encoders and VAE",
            code="bad_argument",
        )
    main = models.checkpoint or models.diffusion_model
    assert main is not None
    det = load_main(session, main, check)
    for path in models.text_encoders:
        session.load(path, "text_encoder", lambda p: None, check)
    if models.vae is not None:
        session.load(models.vae, "vae", lambda p: None, check)
    return det.family


def embedding_folders_beside(paths: Iterable[Path]) -> tuple[Path, ...]:
    """The embeddings folders of the installs that hold ``paths``: ComfyUI's ``models/embeddings``
    (``models/<kind>/file``) and A1111's ``embeddings`` (``models/Stable-diffusion/file``)."""
    found: dict[Path, None] = {}
    for path in paths:
        models = Path(path).resolve().parent.parent
        found[models / "embeddings"] = None
        found[models.parent / "embeddings"] = None
    return tuple(f for f in found if f.is_dir())


def generator_for(
    session: Session,
    models: ModelFiles,
    family: str | None,
    t5_search: T5TokenizerSearch | None = None,
    embeddings: tuple[Path, ...] = (),
) -> Generator:
    """A generator for models loaded from these files: TAESD decoders, embeddings and the T5
    tokenizer are looked for beside them (their ComfyUI install's models/vae_approx and
    models/embeddings, an A1111 install's embeddings, its T5 tokenizer); ``embeddings``: folders
    searched first."""
    installs = comfyui_installs(models.paths)
    beside = [p.resolve().parent.parent / "vae_approx" for p in models.paths]  # models/<kind>/f
    generator = Generator(
        session,
        taesd_folders=(*(r / "models" / "vae_approx" for r in installs), *beside),
        embedding_folders=(*embeddings, *embedding_folders_beside(models.paths)),
    )
    if needs_t5(family):
        search = t5_search or T5TokenizerSearch(comfyui_installs=installs)
        generator.state.t5_tokenizer = T5Tokenizer.find(search)
    return generator


@dataclass(frozen=True)
class Opened:
    """A request's models loaded on a session of their own, its LoRAs stacked, ready to generate."""

    session: Session
    generator: Generator
    image: ImageSettings  # the request's settings with the family's usual values filled in
    init: np.ndarray | None
    dtype: torch.dtype | None
    output: Output
    matches: tuple[LoraMatch, ...]

    def check(self) -> None:
        self.session.placement.manager.check()

    def finish(self, result: GenerateResult) -> GenerateResult:
        """``result`` with how each LoRA matched and why the compute dtype is what it is."""
        chosen = self.session.model(SlotId.MAIN).dtype_choice
        decided = (chosen.reason,) if chosen is not None else ()  # why fp8 matmul runs, or why not
        notes = (*result.notes, *decided, *(m.note() for m in self.matches if m.partial))
        return replace(result, loras=self.matches, notes=notes)


def open_request(
    request: GenerateRequest,
    report: Callable[[GenerateProgress], None],
    *,
    interrupt: threading.Event | None = None,
    t5_search: T5TokenizerSearch | None = None,
    outputs: Iterable[Path] = (),
) -> Opened:
    """Check where the pictures go (``outputs``: names beyond the request's own), then load the
    request's models and LoRAs on a new session."""
    if request.output_is_folder:  # before any work: a bad destination is refused in a second
        check_output_folder(request.output)
    else:
        check_output_file(request.output)
        for name in (*file_paths(request.output, request.image.batch), *outputs):  # the names written
            check_output_file(name)
    settings, dtype = compute_override(request.dtype)  # --dtype fp8_e4m3fn: fp8 matmul, decided at load
    session, _ = headless_session(
        request.device, settings=settings, vram_limit=request.vram_limit, interrupt=interrupt
    )
    check = interrupt_check(session.placement.interrupt.is_set)
    report(GenerateProgress("load", 0, 0, "loading the models"))
    family = load_models(session, request.models, check)
    image = with_family_defaults(request.image, generation_defaults(family), request.family_defaults)
    for arg in request.loras:
        session.loras.add(
            arg.path, arg.model, arg.clip, force=request.force, block_weights=arg.block_weights, on=arg.on
        )
    matches = lora_matches(session)
    if request.strict:
        refuse_partial(matches)
    generator = generator_for(session, request.models, family, t5_search, request.embeddings)
    generator.state.prediction = request.prediction
    init = read_picture(image.init_image) if image.init_image is not None else None
    output = Output(request.output, request.output_is_folder)
    return Opened(session, generator, image, init, dtype, output, matches)


def generate_files(
    request: GenerateRequest,
    *,
    progress: Callable[[GenerateProgress], None] | None = None,
    interrupt: threading.Event | None = None,
    t5_search: T5TokenizerSearch | None = None,
) -> GenerateResult:
    """Everything ``loadout generate`` does; ``interrupt`` (set from any thread) stops it within a
    tensor, a layer or a step, before any picture is written."""
    report = progress or (lambda p: None)
    opened = open_request(request, report, interrupt=interrupt, t5_search=t5_search)
    result = opened.generator.generate(
        opened.image, opened.output, report, opened.check, opened.init, dtype=opened.dtype
    )
    return opened.finish(result)


def refuse_partial(matches: tuple[LoraMatch, ...]) -> None:
    """``--strict``: refuse the first LoRA of which some modules fit nothing in the model (one
    check for ``loadout generate`` and every queue worker, so both say the same)."""
    partial = [m for m in matches if m.partial]
    if partial:
        m = partial[0]
        raise ModelMismatchError(
            f"{m.path.name} fits only {m.matched} of its {m.modules} modules in this model",
            why="strict LoRA matching refuses a LoRA that does not apply whole",
            fix="Pick a LoRA made for this model, or turn strict LoRA matching off to apply what fits",
            code="lora_partial_match",
        )


def lora_matches(session: Session) -> tuple[LoraMatch, ...]:
    """How each LoRA of the session's stack matched the model."""
    stack = session.loras.stack
    return tuple(
        LoraMatch(e.path, e.report.total, len(e.report.matched), len(e.report.unmatched),
                  len(e.report.shape_mismatches))
        for e in (stack.entries.values() if stack is not None else ())
    )  # fmt: skip
