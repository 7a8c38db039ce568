"""What a file's metadata says: ModelSpec and kohya training keys, likely trigger words, family hints.

Metadata is written by many tools and trusted by none: every value is a string that may be
missing, empty, ``"None"`` or broken JSON. Nothing here raises on bad metadata; what cannot be read
is skipped with a warning. Family *hints* (from metadata and file names) are only hints: detection
decides from keys and shapes, and turns to hints only where shapes cannot decide (SD1 vs SDXL VAE,
SD2 epsilon vs v-prediction, Wan 2.1 vs 2.2, ``vae-flux`` vs ``vae-sd3``).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from core.values import METADATA_COUNT, BadValueError

#: Decoded thumbnails larger than this are refused (a header is capped at 100 MB anyway).
THUMBNAIL_CAP = 16 * 1024 * 1024
MAX_TRIGGER_WORDS = 8


@dataclass(frozen=True)
class Hint:
    """A guess about the family (or variant) from metadata or a file name, never from shapes."""

    family: str | None  # a DESIGN.md family id; None for a variant-only hint
    source: str  # "modelspec.architecture" | "ss_base_model_version" | "ss_v2" | "filename" | ...
    text: str  # what was read, for a person: "modelspec.architecture is 'flux-1-dev/lora'"
    variant: str | None = None  # "v-prediction" | "inpaint"
    exact: bool = True  # False when the text names only the line ("flux1", "Wan Video"): a default id


@dataclass(frozen=True)
class MetadataSummary:
    title: str | None = None
    architecture: str | None = None  # ModelSpec ``modelspec.architecture``
    author: str | None = None
    description: str | None = None
    date: str | None = None
    resolution: str | None = None
    trigger_phrase: str | None = None
    license: str | None = None
    tags: str | None = None
    prediction_type: str | None = None
    base_model_name: str | None = None  # kohya ``ss_sd_model_name``: the checkpoint it was trained on
    output_name: str | None = None
    training_comment: str | None = None
    network_module: str | None = None  # "networks.lora", "lycoris.kohya", ...
    network_dim: int | None = None
    network_alpha: float | None = None
    network_args: dict[str, str] = field(default_factory=dict)
    base_model_version: str | None = None  # kohya ``ss_base_model_version``
    v2: bool | None = None
    v_parameterization: bool | None = None
    epochs: int | None = None
    steps: int | None = None
    train_images: int | None = None
    trigger_words: tuple[str, ...] = ()
    has_thumbnail: bool = False
    warnings: tuple[str, ...] = ()


def _text(md: Mapping[str, Any], key: str) -> str | None:
    value = md.get(key)
    if value is None:
        return None
    text = str(value).strip()
    return None if text in ("", "None", "null") else text


def _int(md: Mapping[str, Any], key: str) -> int | None:
    """A count from training metadata, or None when it is missing, not a number, not finite or
    past any real count ("inf", "1e999", "-3": one file's odd metadata never stops a folder's inspect)."""
    text = _text(md, key)
    if text is None:
        return None
    try:
        return METADATA_COUNT.parse_int(text)
    except BadValueError:
        return None


def _float(md: Mapping[str, Any], key: str) -> float | None:
    text = _text(md, key)
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def _bool(md: Mapping[str, Any], key: str) -> bool | None:
    text = _text(md, key)
    if text is None:
        return None
    return {"true": True, "1": True, "false": False, "0": False}.get(text.lower())


def _json(md: Mapping[str, Any], key: str, warnings: list[str]) -> Any:
    text = _text(md, key)
    if text is None:
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        warnings.append(f"{key} is not valid JSON ({exc.__class__.__name__}: {exc}); skipped")
        return None


def _tag_tables(md: Mapping[str, Any], warnings: list[str]) -> list[Mapping[str, Any]]:
    """Every {tag: count} table: ``ss_tag_frequency`` and the ``tag_frequency`` in ``ss_datasets``."""
    tables: list[Any] = []
    freq = _json(md, "ss_tag_frequency", warnings)
    if isinstance(freq, dict):
        tables.extend(freq.values())
    elif freq is not None:
        warnings.append("ss_tag_frequency is not a {dataset: {tag: count}} table; skipped")
    datasets = _json(md, "ss_datasets", warnings)
    if isinstance(datasets, list):
        for ds in datasets:
            if isinstance(ds, dict) and isinstance(ds.get("tag_frequency"), dict):
                tables.extend(ds["tag_frequency"].values())
    return [t for t in tables if isinstance(t, dict)]


def _image_count(md: Mapping[str, Any], warnings: list[str]) -> int | None:
    dirs = _json(md, "ss_dataset_dirs", warnings)
    total = 0
    if isinstance(dirs, dict):
        for info in dirs.values():
            count = info.get("img_count") if isinstance(info, dict) else None
            if METADATA_COUNT.problem(count) is None:  # inf, nan, 1e999, -3, "12": not a count
                total += int(count)  # type: ignore[arg-type]
    return total or None


def _split_words(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]


def trigger_words(md: Mapping[str, Any], warnings: list[str] | None = None) -> tuple[str, ...]:
    """Likely trigger words: the ModelSpec trigger phrase, then the most frequent training tags.

    Tags found in (nearly) every training image come first: they are what the LoRA learned to
    tie to its subject. At most ``MAX_TRIGGER_WORDS``, without case-insensitive duplicates.
    """
    warnings = [] if warnings is None else warnings
    words: list[str] = []
    phrase = _text(md, "modelspec.trigger_phrase")
    if phrase:
        words.extend(_split_words(phrase))
    counts: Counter[str] = Counter()
    order: dict[str, int] = {}
    for table in _tag_tables(md, warnings):
        for tag, n in table.items():
            name = str(tag).strip()
            if name and METADATA_COUNT.problem(n) is None and n > 0:
                counts[name] += int(n)
                order.setdefault(name, len(order))
    if counts:
        images = _image_count(md, warnings) or max(counts.values())
        ranked = sorted(counts, key=lambda t: (-counts[t], order[t]))
        nearly_all = [t for t in ranked if counts[t] >= 0.9 * images]
        words.extend(nearly_all + [t for t in ranked if t not in nearly_all])
    out: list[str] = []
    seen: set[str] = set()
    for w in words:
        if w.lower() not in seen:
            seen.add(w.lower())
            out.append(w)
    return tuple(out[:MAX_TRIGGER_WORDS])


def thumbnail(md: Mapping[str, Any]) -> tuple[str, bytes] | None:
    """(mime type, image bytes) of a ``modelspec.thumbnail`` data URI, or None."""
    text = _text(md, "modelspec.thumbnail")
    if not text or not text.startswith("data:image/") or ";base64," not in text:
        return None
    head, _, data = text.partition(";base64,")
    if len(data) * 3 // 4 > THUMBNAIL_CAP:
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    return (head[len("data:") :], raw) if raw else None


def summarize_metadata(metadata: Mapping[str, str]) -> MetadataSummary:
    """The facts worth showing from ModelSpec and kohya metadata. Never raises on bad values."""
    md = metadata
    warnings: list[str] = []
    args = _json(md, "ss_network_args", warnings)
    net_args = {str(k): str(v) for k, v in args.items()} if isinstance(args, dict) else {}
    words = trigger_words(md, warnings)
    return MetadataSummary(
        title=_text(md, "modelspec.title"),
        architecture=_text(md, "modelspec.architecture"),
        author=_text(md, "modelspec.author"),
        description=_text(md, "modelspec.description"),
        date=_text(md, "modelspec.date"),
        resolution=_text(md, "modelspec.resolution") or _text(md, "ss_resolution"),
        trigger_phrase=_text(md, "modelspec.trigger_phrase"),
        license=_text(md, "modelspec.license"),
        tags=_text(md, "modelspec.tags"),
        prediction_type=_text(md, "modelspec.prediction_type"),
        base_model_name=_text(md, "ss_sd_model_name"),
        output_name=_text(md, "ss_output_name"),
        training_comment=_text(md, "ss_training_comment"),
        network_module=_text(md, "ss_network_module"),
        network_dim=_int(md, "ss_network_dim"),
        network_alpha=_float(md, "ss_network_alpha"),
        network_args=net_args,
        base_model_version=_text(md, "ss_base_model_version"),
        v2=_bool(md, "ss_v2"),
        v_parameterization=_bool(md, "ss_v_parameterization"),
        epochs=_int(md, "ss_epoch") or _int(md, "ss_num_epochs"),
        steps=_int(md, "ss_steps") or _int(md, "ss_max_train_steps"),
        train_images=_int(md, "ss_num_train_images"),
        trigger_words=words,
        has_thumbnail=thumbnail(md) is not None,
        warnings=tuple(warnings),
    )


# Family hints ----------------------------------------------------------------------------------

#: (pattern on the squashed lower-case text, family); the first match wins.
_FAMILY_PATTERNS: tuple[tuple[re.Pattern[str], str | None], ...] = tuple(
    (re.compile(p), f)
    for p, f in (
        (r"ssd1b", "ssd-1b"),
        (r"segmindvega", "segmind-vega"),
        (r"(sdxl|stablediffusionxl).*refiner", "sdxl-refiner"),
        (r"sdxl|stablediffusionxl|pony|illustrious|noobai", "sdxl"),
        (r"(sd|stablediffusion|stablediffusionv)35large", "sd3.5-large"),
        (r"(sd|stablediffusion|stablediffusionv)35medium", "sd3.5-medium"),
        (r"(sd|stablediffusion|stablediffusionv)35", None),  # 3.5 without a size: no guess
        (r"sd3|stablediffusion3|stablediffusionv3", "sd3"),
        (r"kontext", "flux-kontext"),
        (r"flux.*schnell|flux1s$", "flux-schnell"),
        (r"flux.*fill", "flux-fill"),
        (r"flux.*chroma|^chroma", "chroma"),
        (r"flux.*dev|flux1d$", "flux-dev"),
        (r"flux", "flux-dev?"),
        (r"auraflow", "auraflow"),
        (r"hunyuanvideo", "hunyuan-video"),
        (r"hunyuandit|^hunyuan1", "hunyuan-dit"),
        (r"ltxv|ltxvideo|^ltx", "ltxv"),
        (r"wan(video)?22", "wan2.2"),
        (r"wan(video)?21", "wan2.1"),
        (r"wan(video|\d)", "wan2.1?"),
        (r"qwen.*edit.*2511", "qwen-image-edit-2511"),
        (r"qwen.*edit.*(2509|plus)", "qwen-image-edit"),
        (r"qwen.*edit", "qwen-image-edit-2508"),  # Comfy-Org's qwen_image_edit_bf16: the original
        (r"qwen", "qwen-image"),
        (r"lumina", "lumina2"),
        (r"hidream", "hidream"),
        (r"^pixarte$|pixartsigma", "pixart-sigma"),
        (r"^pixarta$|pixartalpha", "pixart-alpha"),
        (r"sdv2|^sd2|stablediffusionv2|stablediffusion2", "sd2"),
        (r"sdv1|^sd1|stablediffusionv1|stablediffusion1", "sd1"),
    )
)
_VPRED = re.compile(r"768v|vpred|vprediction|vparam")


def _squash(text: str) -> str:
    return re.sub(r"[\s_\-.]+", "", text.lower())


def family_match(text: str) -> tuple[str | None, bool]:
    """(family, exact): exact is False when only the line is named and the id is its default."""
    squashed = _squash(text.split("/", 1)[0])
    for pattern, family in _FAMILY_PATTERNS:
        if pattern.search(squashed):
            if family is not None and family.endswith("?"):
                return family[:-1], False
            return family, True
    return None, True


def family_from_text(text: str) -> str | None:
    """A family id named by a base-model string ("sdxl_base_v1-0", "Flux.1 D", "SD 1.5"...)."""
    return family_match(text)[0]


def _from_value(source: str, value: str) -> list[Hint]:
    hints: list[Hint] = []
    family, exact = family_match(value)
    variant = "v-prediction" if _VPRED.search(_squash(value)) else None
    if family is not None or variant is not None:
        hints.append(Hint(family, source, f"{source} is {value!r}", variant, exact))
    return hints


_FILE_RULES: tuple[tuple[re.Pattern[str], str | None, str | None], ...] = tuple(
    (re.compile(p), f, v)
    for p, f, v in (
        (r"(?<![a-z0-9])sd[-_ ]?1[-_.]?[45](?![0-9])|(?<![a-z0-9])v1[-_.]?5(?![0-9])", "sd1", None),
        (r"vae[-_]ft[-_]mse|vae[-_]ft[-_]ema", "sd1", None),
        (r"(?<![a-z0-9])v2[-_.]?[01](?![0-9])|(?<![a-z0-9])sd[-_ ]?2[-_.]?[01]?(?![0-9])", "sd2", None),
        (r"xl(?![a-uw-z])", "sdxl", None),
        (r"(?<![a-z0-9])schnell(?![a-z])", "flux-schnell", None),
        (r"v[-_]?pred(iction)?(?![a-z])|768[-_]v(?![a-z0-9])", None, "v-prediction"),
        (r"inpaint", None, "inpaint"),
    )
)


def _vae_hint(stem: str, families: list[str | None]) -> str | None:
    tokens = set(re.split(r"[^a-z0-9.]+", stem))
    if stem == "ae":
        return "vae-flux"
    if not tokens & {"vae", "ae"} and not re.search(r"(?<![a-z])(flux|sd3|wan[0-9.]*)[-_]?vae", stem):
        return None
    if "sd3" in families or any(f and f.startswith("sd3") for f in families):
        return "vae-sd3"
    if any(f in ("flux-dev", "flux-kontext", "flux-schnell", "flux-fill", "chroma") for f in families):
        return "vae-flux"
    if any(f and f.startswith("wan") for f in families):
        return "vae-wan"
    return None


def filename_hints(filename: str, source: str = "filename") -> list[Hint]:
    """Hints from the words of a file name ("sd_xl_base_1.0", "flux1-schnell", "wan2.2_vae")."""
    name = PurePath(filename.replace("\\", "/")).name
    stem = name.lower()
    for ext in (".safetensors", ".sft", ".ckpt", ".pt", ".pth", ".bin", ".gguf"):
        stem = stem.removesuffix(ext)
    hints: list[Hint] = []
    said = f"{source} {name!r}"
    main, exact = family_match(stem)
    families: list[str | None] = [main]
    if main is not None:
        hints.append(Hint(main, source, f"{said} names {main}", exact=exact))
    for pattern, family, variant in _FILE_RULES:
        if pattern.search(stem) and not (family is not None and family in families):
            if family == "sdxl" and main is not None:
                continue  # "xl" inside a name that already named its family ("xlabs_flux")
            families.append(family)
            hints.append(Hint(family, source, f"{said} says {family or variant}", variant))
    vae = _vae_hint(stem, families)
    if vae is not None:
        hints.append(Hint(vae, source, f"{said} names a {vae} VAE"))
    return hints


def family_hints(filename: str | None, metadata: Mapping[str, str]) -> list[Hint]:
    """Every family/variant hint, metadata first (most specific first), then the file name."""
    md = metadata
    hints: list[Hint] = []
    for key in ("modelspec.architecture", "ss_base_model_version"):
        value = _text(md, key)
        if value is not None:
            hints.extend(_from_value(key, value))
    if _text(md, "modelspec.prediction_type") == "v":
        hints.append(
            Hint(None, "modelspec.prediction_type", "modelspec.prediction_type is 'v'", "v-prediction")
        )
    v2 = _bool(md, "ss_v2")
    if v2:
        hints.append(Hint("sd2", "ss_v2", "ss_v2 is True (trained on SD2)"))
    if _bool(md, "ss_v_parameterization"):
        hints.append(
            Hint(
                "sd2" if v2 else None,
                "ss_v_parameterization",
                "ss_v_parameterization is True",
                "v-prediction",
            )
        )
    trained_on = _text(md, "ss_sd_model_name")
    if trained_on is not None:
        hints.extend(filename_hints(trained_on, "ss_sd_model_name"))
    if filename:
        hints.extend(filename_hints(filename))
    return hints
