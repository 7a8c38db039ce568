"""Generation parameters in the A1111 "infotext" form that Civitai, A1111, Forge and others read.

::

    a castle on a hill <lora:style:0.8>
    Negative prompt: blurry
    Steps: 20, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7, Seed: 42, Size: 512x512,
    Model hash: 0123456789, Model: dreamshaper_8, Lora hashes: "style: 0123456789ab", Version: Loadout 0.1.0

(the last block is one line). Sampler and schedule names are written in A1111's spelling and read
back into ComfyUI's names, which Loadout uses everywhere else. LoRAs are written as A1111 prompt tags
(``<lora:name:strength>``, or ``<lora:name:text:model>`` when the two strengths differ, A1111's
positional order) so that A1111 and Civitai find them; reading strips the tags from the prompt again.
Textual-inversion embeddings the prompts used are ``TI hashes: "name: hash12, ..."`` (A1111: the
first 12 hex digits of the file's SHA-256, the name without ``:`` and ``,``); clip skip is
``Clip skip: N`` (A1111's meaning: 1 the last layer, 2 the penultimate).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from core.errors import LoadoutError
from core.generate.a1111_names import (
    FOLDED_SCHEDULES,
    SAMPLER_LABELS,
    SAMPLER_NAMES,
    SCHEDULER_LABELS,
    SCHEDULER_NAMES,
)
from core.generate.hires_settings import HiresFix
from core.guidance import GuidancePatch, describe_all, read_patches
from core.patching.prompt_target import check_target
from core.regions import Region
from core.regions.text import regions_from_json, regions_to_json
from core.values import (
    CFG,
    CLIP_SKIP,
    DENOISE,
    GUIDANCE,
    LORA_STRENGTH,
    SEED,
    STEPS,
    BadValueError,
    NumberRange,
    check_size,
)

T = TypeVar("T")


@dataclass(frozen=True)
class LoraUse:
    name: str  # file name without extension, as A1111 tags name it
    model_strength: float
    clip_strength: float
    hash: str = ""  # first 12 hex digits of the file's sha256 (A1111's short hash)
    block_weights: str = ""  # LoRA block weights as the tag's ``lbw=`` writes them ("" when none)
    on: str | None = None  # the prompt it acted on only (the tag's ``on=``; None: all)


@dataclass(frozen=True)
class EmbeddingUse:
    name: str  # the embedding's file name without extension
    hash: str  # first 12 hex digits of the file's sha256 (A1111's ``shorthash``)


@dataclass(frozen=True)
class GenerationParameters:
    prompt: str
    negative: str = ""
    steps: int = 20
    sampler: str = "euler"  # ComfyUI names
    scheduler: str = "normal"
    cfg: float = 7.0
    seed: int = 0
    width: int = 512
    height: int = 512
    model: str = ""
    model_hash: str = ""  # first 10 hex digits of the file's sha256 (A1111's "AutoV2")
    loras: tuple[LoraUse, ...] = ()
    denoise: float | None = None  # img2img only ("Denoising strength")
    guidance: float | None = None  # Flux's distilled guidance ("Distilled CFG Scale" in Forge)
    #: the hires fix ("Hires upscale", "Hires steps", "Hires upscaler"; its denoise is "Denoising
    #: strength"); None: none. ``model`` keeps only the name A1111 writes.
    hires: HiresFix | None = None
    clip_skip: int | None = None  # A1111's "Clip skip" (None: the family's own layer)
    embeddings: tuple[EmbeddingUse, ...] = ()  # "TI hashes"
    #: guidance patches ("Guidance patches: pag(scale=3), freeu_v2(b1=1.3,...)"; Loadout's own key)
    patches: tuple[GuidancePatch, ...] = ()
    regions: tuple[Region, ...] = ()  # "Regions: [{...}]" (JSON; Loadout's own key)
    extra: dict[str, str] = field(default_factory=dict)  # other keys read from an image, kept as text
    #: values read from a picture that were not used, by infotext key, with the reason (out of range,
    #: not a number...): the field keeps its default and the reader says so
    ignored: dict[str, str] = field(default_factory=dict)


def _num(value: float) -> str:
    return f"{value:g}"


def _quote(value: str) -> str:
    return json.dumps(value, ensure_ascii=False) if any(c in value for c in ',:\n"') else value


def _lora_tag(lora: LoraUse) -> str:
    lbw = f":lbw={lora.block_weights}" if lora.block_weights else ""  # the lora-block-weight syntax
    lbw += f":on={lora.on}" if lora.on else ""  # Loadout's own: the LoRA on one prompt only
    if lora.model_strength == lora.clip_strength:
        return f"<lora:{lora.name}:{_num(lora.model_strength)}{lbw}>"
    return f"<lora:{lora.name}:{_num(lora.clip_strength)}:{_num(lora.model_strength)}{lbw}>"


def format_parameters(p: GenerationParameters, *, version: str = "") -> str:
    """The infotext for ``p`` (see the module docstring)."""
    prompt = p.prompt
    tags = " ".join(_lora_tag(lo) for lo in p.loras)
    if tags:
        prompt = f"{prompt} {tags}" if prompt else tags
    lines = [prompt]
    if p.negative:
        lines.append(f"Negative prompt: {p.negative}")
    items: list[tuple[str, str]] = [
        ("Steps", str(p.steps)),
        ("Sampler", SAMPLER_LABELS.get(p.sampler, p.sampler)),
        ("Schedule type", SCHEDULER_LABELS.get(p.scheduler, p.scheduler)),
        ("CFG scale", _num(p.cfg)),
    ]
    if p.guidance is not None:
        items.append(("Distilled CFG Scale", _num(p.guidance)))
    items += [("Seed", str(p.seed)), ("Size", f"{p.width}x{p.height}")]
    if p.model_hash:
        items.append(("Model hash", p.model_hash))
    if p.model:
        items.append(("Model", p.model))
    if p.clip_skip is not None:
        items.append(("Clip skip", str(p.clip_skip)))
    if p.hires is not None:
        items.append(("Denoising strength", _num(p.hires.denoise)))
        items.append(("Hires upscale", _num(p.hires.scale)))
        if p.hires.steps:
            items.append(("Hires steps", str(p.hires.steps)))
        items.append(("Hires upscaler", p.hires.label))
    elif p.denoise is not None:
        items.append(("Denoising strength", _num(p.denoise)))
    if p.patches:
        items.append(("Guidance patches", describe_all(p.patches)))
    if p.regions:
        items.append(("Regions", regions_to_json(p.regions)))
    hashes = [f"{lo.name}: {lo.hash}" for lo in p.loras if lo.hash]
    if hashes:
        items.append(("Lora hashes", ", ".join(hashes)))
    ti = [f"{ti_name(e.name)}: {e.hash}" for e in p.embeddings if e.hash]
    if ti:
        items.append(("TI hashes", ", ".join(ti)))
    items += list(p.extra.items())  # in the order given (A1111: "Batch size", then "Batch pos")
    if version:
        items.append(("Version", version))
    lines.append(", ".join(f"{k}: {_quote(v)}" for k, v in items))
    return "\n".join(lines)


_ITEM = re.compile(r'\s*([\w][\w \-/+().]*?):\s*("(?:\\.|[^\\"])*"|[^,]*)(?:,|$)')
_TAG = re.compile(r"<lora:([^:>]+)((?::[^:>]*)*)>")


def ti_name(name: str) -> str:
    """An embedding's name as A1111 writes it in ``TI hashes`` (no ``:`` or ``,``)."""
    return name.replace(":", "").replace(",", "")


def _name_hashes(text: str) -> dict[str, str]:
    """``"a: 0123, b: 4567"`` -> {name: hash} (``Lora hashes``, ``TI hashes``)."""
    out = {}
    for part in text.split(","):
        if ":" in part:
            name, h = part.rsplit(":", 1)
            out[name.strip()] = h.strip()
    return out


def _bad(why: str) -> LoadoutError:
    return LoadoutError(
        "these are not generation parameters Loadout can read",
        why=why,
        fix="Use a PNG saved by Loadout, A1111, Forge or another tool that writes A1111 parameters",
        code="bad_parameters",
    )


def _split_items(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in _ITEM.finditer(line):
        key, value = m.group(1).strip(), m.group(2).strip()
        if value.startswith('"'):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                value = value.strip('"')
        out[key] = value
    return out


def _sampler_and_schedule(label: str, schedule: str | None) -> tuple[str, str]:
    low = label.strip().lower()
    scheduler = SCHEDULER_NAMES.get((schedule or "").strip().lower(), "")
    if low in SAMPLER_NAMES:
        return SAMPLER_NAMES[low], scheduler or "normal"
    for suffix, sched in FOLDED_SCHEDULES.items():
        if low.endswith(" " + suffix) and low[: -len(suffix) - 1] in SAMPLER_NAMES:
            return SAMPLER_NAMES[low[: -len(suffix) - 1]], scheduler or sched
    return label.strip(), scheduler or "normal"


def _loras_from_prompt(
    prompt: str, hashes: dict[str, str], ignored: dict[str, str]
) -> tuple[str, tuple[LoraUse, ...]]:
    found: list[LoraUse] = []
    for m in _TAG.finditer(prompt):
        values = [v for v in m.group(2).split(":")[1:] if v and "=" not in v]
        name = m.group(1).strip()
        try:
            nums = [LORA_STRENGTH.parse(v) for v in values] or [1.0]
        except BadValueError as exc:
            if all(_is_number(v) for v in values):  # a number out of range; otherwise not a strength
                ignored[f"<lora:{name}>"] = exc.message
            continue
        clip, model = (nums[0], nums[1]) if len(nums) > 1 else (nums[0], nums[0])
        lbw = next((v[4:] for v in m.group(2).split(":") if v.lower().startswith("lbw=")), "")
        on = next((v[3:].strip().lower() for v in m.group(2).split(":") if v.lower().startswith("on=")), "")
        try:
            on = check_target(on) or ""
        except LoadoutError as exc:
            ignored[f"<lora:{name}>"] = exc.what
            on = ""
        found.append(LoraUse(name, model, clip, hashes.get(name, ""), lbw, on or None))
    if not found:
        return prompt, ()
    lines = (re.sub(r"[ \t]+", " ", line).strip() for line in _TAG.sub("", prompt).split("\n"))
    stripped = "\n".join(lines).strip()
    return stripped, tuple(found)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _number(items: dict[str, str], key: str, limits: NumberRange, ignored: dict[str, str]) -> float | None:
    """``items[key]`` checked against ``limits``; None (and the reason in ``ignored``) when it is
    missing, not a number, not finite or out of range."""
    if key not in items:
        return None
    try:
        return limits.parse(items[key])
    except BadValueError as exc:
        ignored[key] = exc.message
        return None


def _size(items: dict[str, str], ignored: dict[str, str]) -> tuple[int, int]:
    if "Size" not in items:
        return 512, 512
    m = re.fullmatch(r"\s*(\d{1,6})\s*x\s*(\d{1,6})\s*", items["Size"])
    try:
        if m is None:
            raise BadValueError(f"Size is {items['Size'][:40]!r}, not WIDTHxHEIGHT")
        return check_size(int(m.group(1)), int(m.group(2)))
    except BadValueError as exc:
        ignored["Size"] = exc.message
        return 512, 512


_KNOWN = {
    "Steps",
    "Sampler",
    "Schedule type",
    "CFG scale",
    "Seed",
    "Size",
    "Model hash",
    "Model",
    "Denoising strength",
    "Lora hashes",
    "Distilled CFG Scale",
    "Version",
    "Hires upscale",
    "Hires steps",
    "Hires upscaler",
    "Clip skip",
    "TI hashes",
    "Guidance patches",
    "Regions",
}


_LATENT_LABEL = re.compile(r"Latent(?: \(([\w-]+)\))?")


#: the hires fix's scale as the HiresFix checks it
HIRES_SCALE = NumberRange("the hires scale", 0.1, 8.0)


def _hires(items: dict[str, str], ignored: dict[str, str]) -> HiresFix | None:
    """A1111's hires keys -> a HiresFix (``Latent`` alone is A1111's bilinear latent upscale;
    a model's name comes back as ``model`` with that name, to be found on disk by the caller)."""
    scale = _number(items, "Hires upscale", HIRES_SCALE, ignored)
    if scale is None:
        return None
    given = items.get("Hires steps", "0") != "0"  # A1111 writes 0 for "as many as the first pass"
    steps_read = _number(items, "Hires steps", STEPS, ignored) if given else None
    steps = None if steps_read is None else int(steps_read)
    denoise = _number(items, "Denoising strength", DENOISE, ignored)
    label = items.get("Hires upscaler", "Latent").strip()
    m = _LATENT_LABEL.fullmatch(label)
    method, model = "nearest-exact", None
    if m is not None:  # A1111's names for its latent modes, in ComfyUI's
        method = (m.group(1) or "bilinear").lower()
        method = {"nearest": "nearest-exact", "antialiased": "bilinear"}.get(method, method)
    else:
        model = Path(label)
    return HiresFix(scale, 0.7 if denoise is None else denoise, steps, method, model)


def _decoded(
    items: dict[str, str], key: str, read: Callable[[str], tuple[T, ...]], ignored: dict[str, str]
) -> tuple[T, ...]:
    try:
        return read(items.get(key, ""))
    except LoadoutError as exc:
        ignored[key] = f"{exc.what} ({exc.why})" if exc.why else exc.what
        return ()


def parse_parameters(text: str) -> GenerationParameters:
    """Read an infotext (A1111, Forge, Loadout) back into parameters; unknown keys go to ``extra``."""
    lines = text.strip("\n").split("\n")
    if not lines or "Steps:" not in lines[-1]:
        raise _bad("there is no 'Steps:' line")
    items = _split_items(lines[-1])
    body = lines[:-1]
    neg_at = next((i for i, ln in enumerate(body) if ln.startswith("Negative prompt:")), len(body))
    prompt = "\n".join(body[:neg_at]).strip()
    negative = "\n".join(body[neg_at:])[len("Negative prompt:") :].strip() if neg_at < len(body) else ""
    hashes = _name_hashes(items.get("Lora hashes", ""))
    ignored: dict[str, str] = {}
    prompt, loras = _loras_from_prompt(prompt, hashes, ignored)
    width, height = _size(items, ignored)
    sampler, scheduler = _sampler_and_schedule(items.get("Sampler", "Euler"), items.get("Schedule type"))
    steps = _number(items, "Steps", STEPS, ignored)
    seed = _number(items, "Seed", SEED, ignored)
    cfg = _number(items, "CFG scale", CFG, ignored)
    hires = _hires(items, ignored)
    clip_skip = _number(items, "Clip skip", CLIP_SKIP, ignored)
    embeddings = tuple(EmbeddingUse(n, h) for n, h in _name_hashes(items.get("TI hashes", "")).items())
    patches = _decoded(items, "Guidance patches", read_patches, ignored)
    regions = _decoded(items, "Regions", lambda t: regions_from_json(t) if t else (), ignored)
    return GenerationParameters(
        prompt=prompt,
        negative=negative,
        steps=20 if steps is None else int(steps),
        sampler=sampler,
        scheduler=scheduler,
        cfg=7.0 if cfg is None else cfg,
        seed=0 if seed is None else int(seed),
        width=width,
        height=height,
        model=items.get("Model", ""),
        model_hash=items.get("Model hash", ""),
        loras=loras,
        denoise=None if hires is not None else _number(items, "Denoising strength", DENOISE, ignored),
        guidance=_number(items, "Distilled CFG Scale", GUIDANCE, ignored),
        hires=hires,
        clip_skip=None if clip_skip is None else int(clip_skip),
        embeddings=embeddings,
        patches=patches,
        regions=regions,
        extra={k: v for k, v in items.items() if k not in _KNOWN},
        ignored=ignored,
    )
