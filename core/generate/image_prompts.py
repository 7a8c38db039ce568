"""The session's side of image prompts (IP-Adapter): the adapter and image encoder files loaded
once per session (:class:`ImagePromptCache`), the image encoder found for an adapter when none is
given, each picture read and hashed, the modules registered with the placement (the encoder and
the adapter's projection with the text encoders for "text_encode", the adapter with the UNet for
"sample"), and the PNG parameters that name them (``IP-Adapter N``, read back by
:func:`ip_adapters_in`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.detect.catalog import REGISTRY
from core.detect.detector import detect
from core.errors import LoadoutError
from core.files import read_tensor_index
from core.generate.ip_adapter import AppliedIpAdapter, IpAdapterPass, check_encoder, check_family
from core.generate.pictures import read_picture
from core.generate.references import file_sha256
from core.generate.workflow_request import IpAdapterUse
from core.loading.image_encoder import LoadedImageEncoder, load_image_encoder
from core.loading.ip_adapter import LoadedIpAdapter, load_ip_adapter
from core.loading.loader import LoadOptions
from core.sampling.model_sampling import ModelSampling
from core.session.session import Session

#: the folders an image encoder is looked for in, relative to the adapter's (ComfyUI keeps
#: models/ipadapter beside models/clip_vision)
ENCODER_FOLDERS = (".", "../clip_vision", "../image_encoder", "image_encoder")
_SUFFIXES = (".safetensors", ".sft")


@dataclass
class ImagePromptCache:
    """Loaded IP-Adapters and image encoders kept between generations of one session (by path)."""

    adapters: dict[Path, LoadedIpAdapter] = field(default_factory=dict)
    encoders: dict[Path, LoadedImageEncoder] = field(default_factory=dict)

    def adapter(self, path: Path, check: Callable[[], None] | None) -> LoadedIpAdapter:
        key = Path(path).resolve()
        if key not in self.adapters:
            self.adapters[key] = load_ip_adapter(key, LoadOptions(check=check))
        return self.adapters[key]

    def encoder(self, path: Path, check: Callable[[], None] | None) -> LoadedImageEncoder:
        key = Path(path).resolve()
        if key not in self.encoders:
            self.encoders[key] = load_image_encoder(key, LoadOptions(check=check))
        return self.encoders[key]

    def keep_only(self, paths: set[Path]) -> list[object]:
        """Forget the ones not used now; their modules (for the placement to release)."""
        gone: list[object] = [v.module for k, v in self.adapters.items() if k not in paths]
        gone += [v.module for k, v in self.encoders.items() if k not in paths]
        self.adapters = {k: v for k, v in self.adapters.items() if k in paths}
        self.encoders = {k: v for k, v in self.encoders.items() if k in paths}
        return gone


def _title(family: str | None) -> str:
    found = REGISTRY.get(family) if family else None
    return found.title if found is not None else str(family)


def find_image_encoder(adapter: LoadedIpAdapter) -> Path:
    """The image encoder file an adapter reads with, looked for beside it and in the sibling
    ``clip_vision`` folder (headers only); refused in words, saying which and where to put it."""
    want = adapter.encoder
    folders = [(adapter.path.parent / f).resolve() for f in ENCODER_FOLDERS]
    for folder in dict.fromkeys(folders):
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix.lower() not in _SUFFIXES or not path.is_file():
                continue
            try:
                index = read_tensor_index(path)
            except LoadoutError:
                continue
            det = detect(index.tensors, {}, path.name)
            if det.kind == "image_encoder" and det.family == want:
                return path
    raise LoadoutError(
        f"{adapter.path.name} needs the {_title(want)} image encoder, and none was found",
        why=f"an IP-Adapter reads its picture with a CLIP vision model; none of {_title(want)} is in "
        + ", ".join(str(f) for f in dict.fromkeys(folders) if f.is_dir()),
        fix=f"Put the {_title(want)} vision model (e.g. CLIP-ViT-H-14-laion2B-s32B-b79K.safetensors, "
        "h94/IP-Adapter's models/image_encoder) in ComfyUI's models/clip_vision beside models/ipadapter, "
        "or name the image encoder file",
        code="missing_image_encoder",
    )


def _num(v: float) -> str:
    return f"{v:g}"


def parameter_item(index: int, use: IpAdapterUse, model: str, encoder: str, sha256: str) -> tuple[str, str]:
    """``IP-Adapter 0: "Model: ip-adapter_sd15 [0123456789], Image: a.png: <12 hex>, Weight: 0.8,
    Start: 0, End: 1, Encoder: clip-vit-h [hash]"``."""
    picture = Path(use.picture).name.replace(",", "")
    text = (
        f"Model: {model}, Image: {picture}: {sha256[:12]}, Weight: {_num(use.weight)}, "
        f"Start: {_num(use.start)}, End: {_num(use.end)}, Encoder: {encoder}"
    )
    return f"IP-Adapter {index}", text


def ip_adapter_pass(
    session: Session, cache: ImagePromptCache, uses: tuple[IpAdapterUse, ...], family: str,
    sampling: ModelSampling, check: Callable[[], None], named: Callable[[Path, int], str],
) -> tuple[IpAdapterPass | None, dict[str, list[object]], dict[str, str]]:  # fmt: skip
    """This generation's image prompts: the pass, the modules per phase, and their manager names."""
    placement = session.placement
    pairs = []
    for use in uses:
        adapter = cache.adapter(use.path, check)
        check_family(adapter, family)
        encoder_path = use.encoder if use.encoder is not None else find_image_encoder(adapter)
        encoder = cache.encoder(encoder_path, check)
        check_encoder(adapter, encoder)
        pairs.append((use, adapter, encoder))
    wanted = {p for _, a, e in pairs for p in (a.path.resolve(), e.path.resolve())}
    for gone in cache.keep_only(wanted):
        placement.release(gone)
    if not pairs:
        return None, {}, {}
    applied, params, names = [], {}, {}
    phases: dict[str, list[object]] = {"text_encode": [], "sample": []}
    for i, (use, adapter, encoder) in enumerate(pairs):
        picture = read_picture(use.picture, "image prompt")
        sha = file_sha256(use.picture)
        rng = (sampling.percent_to_sigma(use.start), sampling.percent_to_sigma(use.end))
        applied.append(AppliedIpAdapter(adapter, encoder, picture, use.weight, rng))
        for module, name in ((adapter.module, f"{adapter.path.stem} IP-Adapter"),
                             (encoder.module, f"{encoder.path.stem} image encoder")):  # fmt: skip
            if placement.active and placement.manager.find(module) is None:
                placement.register(module, name)
            names[name] = "ip_adapter" if module is adapter.module else "image_encoder"
        for phase, modules in (
            ("text_encode", (encoder.module, adapter.module)),
            ("sample", (adapter.module,)),
        ):
            phases[phase] += [m for m in modules if m not in phases[phase]]
        key, text = parameter_item(i, use, named(adapter.path, 10), named(encoder.path, 10), sha)
        params[key] = text
    made = IpAdapterPass(tuple(applied))
    made.contribution.models = phases
    made.contribution.files = tuple(dict.fromkeys(p for _, a, e in pairs for p in (a.path, e.path)))
    made.contribution.parameters = params
    return made, phases, names


@dataclass(frozen=True)
class IpAdapterParameters:
    """One image prompt as a picture's parameters name it."""

    model: str
    image: str
    image_hash: str
    weight: float
    start: float
    end: float
    encoder: str


def ip_adapters_in(extra: dict[str, str]) -> tuple[IpAdapterParameters, ...]:
    """The ``IP-Adapter 0``, ``IP-Adapter 1``... items of an infotext's extra keys, in order; items
    that do not read as Loadout's form are left out."""
    found: list[tuple[int, IpAdapterParameters]] = []
    for key, text in extra.items():
        if not key.startswith("IP-Adapter ") or not key[11:].isdigit():
            continue
        fields = {k.strip(): v.strip() for k, _, v in (p.partition(":") for p in text.split(", ")) if v}
        try:
            image, _, digest = fields["Image"].rpartition(":")
            item = IpAdapterParameters(
                fields["Model"], image.strip(), digest.strip(), float(fields.get("Weight", "1")),
                float(fields.get("Start", "0")), float(fields.get("End", "1")), fields.get("Encoder", ""),
            )  # fmt: skip
        except (KeyError, ValueError):
            continue
        found.append((int(key[11:]), item))
    return tuple(item for _, item in sorted(found, key=lambda p: p[0]))
