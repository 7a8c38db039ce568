"""``loadout generate [CHECKPOINT] [--diffusion-model F] [--text-encoder F]... [--vae F] --prompt P
[--negative N] [--lora FILE[:MODEL[:CLIP]]]... [--seed S] [--steps N] [--cfg X] [--sampler NAME]
[--scheduler NAME] [--size WxH] [--batch B] [--init IMAGE [--mask MASK] --denoise D]
[--init IMAGE --outpaint LEFT,TOP,RIGHT,BOTTOM [--feather N]] [--reference PICTURE]... [--keep-reference-size]
[--controlnet FILE:HINT[:STRENGTH[:START:END]][:type=NAME]]...
[--ip-adapter FILE:PICTURE[:WEIGHT[@START-END]][:type=NAME][:mask=FILE]]...
[--redux FILE:PICTURE[:STRENGTH[:TYPE]]]...
[--image-encoder FILE]
[--refiner FILE [--refiner-switch F]]
[--hires-scale S --hires-denoise D [--hires-steps N] [--hires-upscaler METHOD_OR_FILE]]
[--patch NAME[:ARG=VALUE,...]]... [--lora-schedule NAME=MULT@START,...]...
[--region [negative:]X,Y,W,H[:STRENGTH][@START-END]=PROMPT]... [--regions FILE]
[--device D] [--dtype D] [--vram-limit BYTES] -o OUT.png [--json]``: text to image (img2img with
--init, inpainting with --mask, outpainting with --outpaint, editing with --reference), with
ControlNets, the hires fix, the SDXL refiner, guidance patches (PAG, FreeU ...) and regions (parts
of the picture with their own prompts).

With ``--x AXIS:V1,V2,... [--y ...] [--z ...] [--ray ADDRESS|local:N] -o DIR`` a grid: one picture per
cell and a labelled grid per Z value in DIR, in-process or on a Ray cluster (core/queue)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from app.commands.args import (
    DEVICE_HELP,
    default_device,
    int_type,
    number_type,
    parse_bytes,
    parse_lora,
    parse_patch_argument,
    parse_region_argument,
    parse_size,
    read_regions_file,
)
from app.commands.hires_args import hires_from_arguments
from app.commands.image_prompt_args import image_prompt_settings
from app.commands.reference_args import reference_settings
from app.commands.stopping import guarded_inputs, report_stop, stop_signals
from app.commands.words import cli_words
from app.commands.workflow_args import add_workflow_arguments, control_settings
from app.demo import with_demo_note
from app.terminal import for_terminal
from core.detect.prediction import PREDICTIONS
from core.errors import InterruptedByUser, LoadoutError
from core.generate.command import generate_files
from core.generate.events import GenerateProgress
from core.generate.outpaint_settings import parse_sides
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.generate.workflow_request import RefinerUse
from core.loading.convert_file import DTYPES, parse_dtype
from core.patching.schedule import parse_schedule
from core.queue.command import GridReport, cluster_pool, run_grid
from core.queue.grid import AXES, axis_of, parse_axis
from core.queue.session_grid import SessionGrid, grid_files
from core.queue.store import Totals
from core.sampling import SAMPLERS, SCHEDULERS
from core.values import BATCH, CFG, CLIP_SKIP, GUIDANCE, SEED, STEPS


def register(sub: Any) -> None:
    p = sub.add_parser(
        "generate",
        help="make pictures from a prompt (ComfyUI's seeds give the same pictures)",
        description="Text to image with a checkpoint, or a diffusion model with separate text "
        "encoders and VAE. Seed, sampler, scheduler, steps and CFG mean what they mean in "
        "ComfyUI's KSampler. Each PNG carries its parameters in the A1111 form.",
    )
    _add_models(p)
    _add_sampling(p)
    _add_picture(p)
    _add_grid(p)
    add_workflow_arguments(p)
    _add_run(p)
    p.set_defaults(handler=run)


def _add_models(p: argparse.ArgumentParser) -> None:
    """The model files, the prompt and the LoRAs."""
    p.add_argument("checkpoint", nargs="?", metavar="CHECKPOINT")
    p.add_argument("--diffusion-model", metavar="F", help="a UNet/transformer file (GGUF too)")
    p.add_argument("--text-encoder", action="append", default=[], metavar="F", help="repeat for each")
    p.add_argument("--vae", metavar="F")
    p.add_argument("--prompt", required=True)
    p.add_argument("--negative", default="")
    p.add_argument("--lora", action="append", default=[], metavar="FILE[:MODEL[:CLIP]]")
    p.add_argument(
        "--embeddings", action="append", default=[], metavar="DIR",
        help="a folder of textual-inversion embeddings (repeatable; searched before the models' "
        "install's embeddings folder): use them as embedding:NAME or by bare name",
    )  # fmt: skip
    p.add_argument(
        "--prediction", choices=list(PREDICTIONS), default=None,
        help="what an SD1/SD2/SDXL model predicts when its file does not say: eps, v (v-prediction), "
        "v-ztsnr (v-prediction with zero terminal SNR)",
    )  # fmt: skip
    p.add_argument(
        "--clip-skip", type=int_type(CLIP_SKIP), default=None, metavar="N",
        help="A1111's clip skip: 1 the last CLIP layer, 2 the penultimate (default: the model's own)",
    )  # fmt: skip


def _add_sampling(p: argparse.ArgumentParser) -> None:
    """ComfyUI's KSampler settings."""
    p.add_argument("--seed", type=int_type(SEED), default=0)
    family = "default: the model family's usual value"
    p.add_argument(
        "--steps",
        type=int_type(STEPS),
        default=None,
        help=f"{family} (Z-Image Turbo 8, Flux schnell 4), else 20",
    )
    p.add_argument(
        "--cfg", type=number_type(CFG), default=None, help=f"{family} (7 SD1/2/XL, 4.5 SD3, 1 Flux)"
    )
    p.add_argument(
        "--guidance", type=number_type(GUIDANCE), default=None, help="Flux-dev's distilled guidance (3.5)"
    )
    p.add_argument("--sampler", choices=list(SAMPLERS), default=None, help=f"{family}, else euler")
    p.add_argument("--scheduler", choices=list(SCHEDULERS), default=None, help=f"{family}, else normal")


def _add_picture(p: argparse.ArgumentParser) -> None:
    """The picture's size, batch and starting image."""
    p.add_argument("--size", default="512x512", metavar="WxH")
    p.add_argument("--batch", type=int_type(BATCH), default=1)
    p.add_argument("--init", metavar="IMAGE", help="img2img: the picture to start from")


def _add_grid(p: argparse.ArgumentParser) -> None:
    """A LoRA strength sweep or a grid of up to three axes."""
    p.add_argument(
        "--sweep", metavar="S1,S2,...",
        help="the first LoRA at each strength (model and text encoder): one picture each and a grid, "
        "made in this process on the loaded models (a grid with one lora-strength axis)",
    )  # fmt: skip
    for axis in ("x", "y", "z"):
        p.add_argument(
            f"--{axis}", metavar="AXIS:V1,V2,...", help=f"a grid's {axis.upper()} axis: " + ", ".join(AXES)
        )
    p.add_argument("--ray", metavar="ADDRESS|local:N", help="run a grid's cells on a Ray cluster")


def _add_run(p: argparse.ArgumentParser) -> None:
    """Where it runs, the output and the report."""
    p.add_argument("--device", default=None, help=DEVICE_HELP)
    p.add_argument(
        "--dtype", choices=list(DTYPES),
        help="compute dtype (default: the device's policy); fp8_e4m3fn: fp8 matmul where the card has it",
    )  # fmt: skip
    p.add_argument("--vram-limit", metavar="BYTES", help="e.g. 4GiB: the card size the manager sees")
    p.add_argument(
        "-o", "--output", required=True, metavar="OUT.png",
        help="the picture to write (a batch adds -2, -3...); an existing folder: numbered pictures in it; "
        "a grid (--x): the folder for its cells and grids",
    )  # fmt: skip
    p.add_argument(
        "--strict", action="store_true", help="refuse a LoRA of which some modules fit nothing in the model"
    )
    p.add_argument("--force", action="store_true", help="apply a LoRA made for another model family anyway")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _request(args: argparse.Namespace) -> GenerateRequest:
    width, height = parse_size(args.size)
    models = ModelFiles(
        checkpoint=Path(args.checkpoint) if args.checkpoint else None,
        diffusion_model=Path(args.diffusion_model) if args.diffusion_model else None,
        text_encoders=tuple(Path(p) for p in args.text_encoder),
        vae=Path(args.vae) if args.vae else None,
    )
    given = {"steps": args.steps, "sampler": args.sampler, "scheduler": args.scheduler}
    sampling = Sampling(  # what is not given: the family's usual value once the model is read
        seed=args.seed,
        cfg=args.cfg,
        denoise=args.denoise,
        guidance=args.guidance,
        **{k: v for k, v in given.items() if v is not None},
    )
    image = ImageSettings(
        prompt=args.prompt,
        negative=args.negative,
        sampling=sampling,
        width=width,
        height=height,
        batch=args.batch,
        init_image=Path(args.init) if args.init else None,
        hires=hires_from_arguments(args),
        **control_settings(args),
        mask_image=Path(args.mask) if args.mask else None,
        outpaint=parse_sides(args.outpaint, args.feather) if args.outpaint else None,
        refiner=RefinerUse(Path(args.refiner), args.refiner_switch) if args.refiner else None,
        clip_skip=args.clip_skip,
        guidance_patches=tuple(parse_patch_argument(t) for t in args.patch if t.strip().lower() != "none"),
        lora_schedules=tuple(parse_schedule(t) for t in args.lora_schedule),
        **reference_settings(args),
        **image_prompt_settings(args),
        regions=(
            *(read_regions_file(Path(args.regions)) if args.regions else ()),
            *(parse_region_argument(t) for t in args.region),
        ),
    )
    return GenerateRequest(
        models=models,
        image=image,
        loras=tuple(parse_lora(t) for t in args.lora),
        output=Path(args.output),
        # an existing folder: the pictures go into it, numbered as the window numbers them
        output_is_folder=os.path.isdir(args.output),  # False for a name too long: refused next
        device=args.device or default_device(),
        dtype=parse_dtype(args.dtype) if args.dtype else None,
        vram_limit=parse_bytes(args.vram_limit) if args.vram_limit else None,
        strict=args.strict,
        force=args.force,
        # no --patch: the family's usual patches (CFGNorm on Qwen-Image-Edit); --patch none: none
        family_defaults=(
            *(k for k, v in given.items() if v is None),
            *(("patches",) if not args.patch else ()),
        ),
        embeddings=tuple(Path(p) for p in args.embeddings),
        prediction=args.prediction,
    )


def _printer(quiet: bool) -> Any:
    def show(p: GenerateProgress) -> None:
        if quiet:
            return
        steps = f" {p.step}/{p.steps}" if p.steps else ""
        print(f"\r{p.phase}{steps} {p.message}".ljust(60), end="", file=sys.stderr, flush=True)
        if p.steps and p.step == p.steps:
            print(file=sys.stderr)

    return show


def _bar(quiet: bool) -> Any:
    def show(t: Totals) -> None:
        if quiet:
            return
        filled = int(30 * t.fraction)
        print(
            f"\r[{'#' * filled}{'.' * (30 - filled)}] {t.done}/{t.total} cells",
            end="",
            file=sys.stderr,
            flush=True,
        )

    return show


@contextlib.contextmanager
def _data_stdout(separate: bool) -> Iterator[TextIO]:
    """Where the command's data (the JSON, the grid paths) goes: stdout. With ``separate`` (a Ray
    cluster, whose processes and threads print to this process's stdout) everything else written
    to stdout goes to stderr meanwhile, so ``--json`` output stays JSON."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (captured): nothing to separate
        separate = False
    if not separate:
        yield sys.stdout
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    data = os.fdopen(os.dup(fd), "w")
    os.dup2(sys.stderr.fileno(), fd)
    try:
        yield data
    finally:
        data.flush()
        data.close()
        sys.stdout.flush()
        os.dup2(saved, fd)
        os.close(saved)


def run_grid_command(args: argparse.Namespace, request: GenerateRequest, interrupt: threading.Event) -> int:
    if args.sweep is not None:
        raise LoadoutError(
            "--sweep and --x cannot be combined", fix="Use --x lora-strength:... instead", code="bad_argument"
        )
    if args.ray is None and args.y is None and args.z is None and not args.x:
        raise LoadoutError("a grid needs --x", code="bad_argument")
    axes = (
        parse_axis(args.x),
        parse_axis(args.y) if args.y else None,
        parse_axis(args.z) if args.z else None,
    )
    folder = Path(args.output)
    show = _bar(args.quiet or args.json)
    with _data_stdout(bool(args.ray)) as data:
        with contextlib.ExitStack() as stack:
            pool = stack.enter_context(cluster_pool(args.ray, request, interrupt)) if args.ray else None
            report = run_grid(request, folder, axes, pool=pool, progress=show, interrupt=interrupt)
        return _grid_report(args, report, folder, data)


def _grid_report(args: argparse.Namespace, report: GridReport, folder: Path, data: TextIO) -> int:
    if not (args.quiet or args.json):
        print(file=sys.stderr)
    if args.json:
        json.dump(report.to_json(), data, indent=1)
        data.write("\n")
        data.flush()
    else:
        for path in report.grids:
            print(path, file=data, flush=True)
        workers = ", ".join(
            f"{w}: {s['jobs']} cells, {s['model_loads']} loads" for w, s in report.workers.items()
        )
        print(f"{len(report.cells)} cells in {folder} ({workers})", file=sys.stderr)
    for failure in report.failed:
        print(f"loadout: {for_terminal(failure)}", file=sys.stderr)
    return 1 if report.failed else 0


def run(args: argparse.Namespace) -> int:
    if (args.y or args.z or args.ray) and not args.x:
        raise LoadoutError(
            "--y, --z and --ray need a grid's --x axis", fix="Give --x AXIS:V1,V2,...", code="bad_argument"
        )
    request = _request(args)
    interrupt = threading.Event()
    try:
        inputs = (
            *request.models.paths, *(a.path for a in request.loras), request.image.init_image,
            *request.image.references, request.image.image_encoder,
            request.image.control_picture.picture if request.image.control_picture else None,
            *(p for u in (*request.image.ip_adapters, *request.image.redux) for p in (u.path, u.picture)),
        )  # fmt: skip
        with stop_signals(interrupt), guarded_inputs(inputs, interrupt):  # checked between layers and steps
            if args.x:
                return run_grid_command(args, request, interrupt)
            show = _printer(args.quiet or args.json)
            if args.sweep is not None:  # a grid of one strength axis, on this process's session
                grid = SessionGrid(axis_of("lora-strength", args.sweep))
                result = grid_files(request, grid, progress=show, interrupt=interrupt)
            else:
                result = generate_files(request, progress=show, interrupt=interrupt)
    except InterruptedByUser as exc:
        return report_stop(exc)
    result = with_demo_note(result, request.models.checkpoint or request.models.diffusion_model)
    report = result.to_json()
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for image in result.images:
            print(image.path)
        print(
            f"seed {result.seed}: {result.seconds_per_step:.3f} s/step "
            + ", ".join(f"{k} {v:.2f} s" for k, v in result.seconds.items()),
            file=sys.stderr,
        )
    for note in result.notes:  # on stderr with --json too (they are in the report as well)
        print(f"note: {cli_words(note)}", file=sys.stderr)
    return 0
