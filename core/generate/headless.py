"""``loadout generate``: load the files, add the LoRAs, make the pictures, save them.

The same :class:`~core.session.session.Session` the window uses does the work, placing on the
device asked for (``--vram-limit`` simulates a card of that size, on the CPU too), so the command
line shows exactly what the window would do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from core.errors import LoadoutError
from core.generate.events import GenerateProgress, GenerateResult
from core.generate.generator import T5_FAMILIES, Generator
from core.generate.pictures import read_picture
from core.generate.request import GenerateRequest, ModelFiles
from core.generate.session_run import Output
from core.generate.sweep import Sweep
from core.loading.assign import interrupt_check
from core.loading.loader import inspect_for_loading
from core.memory.devices import device_named
from core.session.placement import Placement, PlacementConfig
from core.session.session import Session
from core.text.t5_tokenizer import T5Tokenizer, T5TokenizerSearch


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


def _load_all(session: Session, models: ModelFiles, check: Callable[[], None]) -> str | None:
    if models.checkpoint is not None and models.diffusion_model is not None:
        raise LoadoutError(
            "both a checkpoint and a diffusion model were given",
            why="the diffusion model would replace the checkpoint's, and only its text encoders and VAE "
            "would be used",
            fix="Give the checkpoint alone, or --diffusion-model with --text-encoder and --vae",
            code="bad_argument",
        )
    main = models.checkpoint or models.diffusion_model
    assert main is not None
    index, det = inspect_for_loading(main)
    kind = "checkpoint" if det.kind == "checkpoint" else "diffusion_model"
    session.load(main, kind, lambda p: None, check, inspected=(index, det))
    for path in models.text_encoders:
        session.load(path, "text_encoder", lambda p: None, check)
    if models.vae is not None:
        session.load(models.vae, "vae", lambda p: None, check)
    return det.family


def generate_files(
    request: GenerateRequest,
    *,
    progress: Callable[[GenerateProgress], None] | None = None,
    interrupt: threading.Event | None = None,
    t5_search: T5TokenizerSearch | None = None,
) -> GenerateResult:
    """Everything ``loadout generate`` does; ``interrupt`` (set from any thread) stops it within a
    tensor, a layer or a step, before any picture is written."""
    device = device_named(request.device)
    config = PlacementConfig(simulate_bytes=request.vram_limit or 0)
    placement = Placement(device, config, interrupt=interrupt, cpu_is_device=True)
    session = Session(placement)
    check = interrupt_check(placement.interrupt.is_set)
    report = progress or (lambda p: None)
    report(GenerateProgress("load", 0, 0, "loading the models"))
    family = _load_all(session, request.models, check)
    for arg in request.loras:
        session.loras.add(arg.path, arg.model, arg.clip)
    installs = comfyui_installs(request.models.paths)
    beside = [p.resolve().parent.parent / "vae_approx" for p in request.models.paths]  # models/<kind>/f
    generator = Generator(session, taesd_folders=(*(r / "models" / "vae_approx" for r in installs), *beside))
    if family in T5_FAMILIES:
        search = t5_search or T5TokenizerSearch(comfyui_installs=comfyui_installs(request.models.paths))
        generator.state.t5_tokenizer = T5Tokenizer.find(search)
    init = read_picture(request.image.init_image) if request.image.init_image is not None else None
    output = Output(request.output, request.output_is_folder)
    check = placement.manager.check
    if request.sweep:
        stack = session.loras.stack
        if stack is None or not stack.entries:
            raise LoadoutError(
                "a strength sweep needs a LoRA", fix="Add one with --lora FILE", code="bad_argument"
            )
        sweep = Sweep(next(iter(stack.entries)), request.sweep)
        return generator.sweep(request.image, sweep, output, report, check)
    return generator.generate(request.image, output, report, check, init, dtype=request.dtype)
