"""The session's side of image prompts (IP-Adapter, FLUX Redux): the adapter, style model and
image encoder files loaded once per session (:class:`ImagePromptCache`), the image encoder found
for them when the settings name none (:class:`EncoderSearch`: the library's, a ComfyUI install's
``models/clip_vision``, or beside their files), and for IP-Adapter each picture read and hashed,
the modules registered with the placement (the encoder and the adapter's projection with the text
encoders for "text_encode", the adapter with the UNet for "sample"), and the PNG parameters that
name them (``IP-Adapter N``, read back by :func:`ip_adapters_in`). FLUX Redux's pass is made by
:mod:`core.generate.redux_session`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from core.detect.catalog import family_title
from core.detect.detector import detect
from core.errors import LoadoutError
from core.faces.analysis import FaceReader, open_face_reader
from core.files import read_tensor_index
from core.generate.ip_adapter import AppliedIpAdapter, IpAdapterPass, check_encoder, check_family
from core.generate.ip_faceid import face_folder, face_scale, read_face
from core.generate.ip_weights import BlockWeights, parse_layer_weights, show_layer_weights
from core.generate.pictures import read_mask, read_picture
from core.generate.references import file_sha256
from core.generate.request import ImageSettings
from core.generate.workflow_request import IpAdapterUse
from core.loading.image_encoder import LoadedImageEncoder, load_image_encoder
from core.loading.image_prompts import LoadedStyleModel, load_style_model
from core.loading.ip_adapter import FACEID_VARIANTS, LoadedIpAdapter, load_ip_adapter
from core.loading.loader import LoadOptions
from core.preprocess.onnx_models import keep_in_ram
from core.sampling.model_sampling import ModelSampling
from core.session.session import Session

#: the folders an image encoder is looked for in, relative to the folder of the file that needs it
#: (ComfyUI keeps models/ipadapter and models/style_models beside models/clip_vision; h94's
#: repositories keep models/image_encoder beside the adapters)
ENCODER_FOLDERS = (".", "../clip_vision", "../image_encoder", "image_encoder")
_SUFFIXES = (".safetensors", ".sft")
#: said when an IP-Adapter's image encoder is missing: the usual file and where it comes from
IP_ADAPTER_ENCODER = "e.g. CLIP-ViT-H-14-laion2B-s32B-b79K.safetensors, h94/IP-Adapter's models/image_encoder"


@dataclass
class ImagePromptCache:
    """Loaded IP-Adapters, style models and image encoders kept between generations of one session
    (by resolved path)."""

    adapters: dict[Path, LoadedIpAdapter] = field(default_factory=dict)
    encoders: dict[Path, LoadedImageEncoder] = field(default_factory=dict)
    styles: dict[Path, LoadedStyleModel] = field(default_factory=dict)
    faces: dict[Path, FaceReader] = field(default_factory=dict)  # InsightFace's files, by folder

    def face_reader(self, folder: Path) -> FaceReader:
        key = Path(folder).resolve()
        if key not in self.faces:
            self.faces[key] = open_face_reader(key)
        return self.faces[key]

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

    def style(self, path: Path, check: Callable[[], None] | None) -> LoadedStyleModel:
        key = Path(path).resolve()
        if key not in self.styles:
            self.styles[key] = load_style_model(key, LoadOptions(check=check))
        return self.styles[key]

    def paths(self) -> list[Path]:
        """The files it keeps mapped."""
        return [*self.adapters, *self.encoders, *self.styles]

    def keep_only(self, paths: set[Path]) -> list[nn.Module]:
        """Forget the ones not used now; their modules (for the placement to release)."""
        gone: list[nn.Module] = []
        for kept in (self.adapters, self.encoders, self.styles):
            gone += [v.module for k, v in kept.items() if k not in paths]
            for k in [k for k in kept if k not in paths]:
                del kept[k]
        return gone


@dataclass(frozen=True)
class EncoderSearch:
    """Where an image encoder is looked for when the settings name none, in order: the library's
    image encoders (``known``: path, family), each ComfyUI install's ``models/clip_vision``
    (``installs``), then the :data:`ENCODER_FOLDERS` beside the file that needs it (headers only)."""

    known: tuple[tuple[Path, str | None], ...] = ()
    installs: tuple[Path, ...] = ()

    def folders(self, near: Path) -> list[Path]:
        here = Path(near).resolve().parent
        found = [root / "models" / "clip_vision" for root in self.installs]
        return list(dict.fromkeys([*found, *((here / f).resolve() for f in ENCODER_FOLDERS)]))

    def find(self, family: str | None, near: Path) -> Path | None:
        """The first image encoder file of ``family`` for the file ``near``, or None."""
        for path, fam in self.known:
            if fam == family and Path(path).is_file():
                return Path(path)
        for folder in self.folders(near):
            for path in sorted(folder.iterdir()) if folder.is_dir() else []:
                if path.suffix.lower() not in _SUFFIXES or not path.is_file():
                    continue
                try:
                    index = read_tensor_index(path)
                except (LoadoutError, OSError):
                    continue
                det = detect(index.tensors, {}, path.name)
                if det.kind == "image_encoder" and det.family == family:
                    return path
        return None

    def missing(self, needs: Path, family: str | None, why: str, example: str) -> LoadoutError:
        """The refusal when :meth:`find` found none: which encoder, where it was looked for, and
        where to put it (``example``: its usual file name and where to get it)."""
        looked = [str(f) for f in self.folders(needs) if f.is_dir()]
        return LoadoutError(
            f"{needs.name} needs the {family_title(family)} image encoder, and none was found",
            why=f"{why}; none of {family_title(family)} is in the library"
            + (" or in " + ", ".join(looked) if looked else ""),
            fix=f"Put the {family_title(family)} vision model ({example}) in ComfyUI's models/clip_vision "
            "beside the folder of the file that needs it, or name the image encoder file",
            code="missing_image_encoder",
        )


def image_encoder_for(
    cache: ImagePromptCache, given: Path | None, search: EncoderSearch, family: str | None, needs: Path,
    why: str, example: str, check: Callable[[], None] | None,
) -> LoadedImageEncoder:  # fmt: skip
    """The image encoder the settings name, else the one of ``family`` found for the file
    ``needs``, loaded (once per session); refused in words when there is none."""
    path = given if given is not None else search.find(family, needs)
    if path is None:
        raise search.missing(needs, family, why, example)
    return cache.encoder(path, check)


def _num(v: float) -> str:
    return f"{v:g}"


def _file(path: Path) -> str:
    return Path(path).name.replace(",", "")


def parameter_item(
    index: int, use: IpAdapterUse, model: str, encoder: str, sha256: str, mask_sha256: str = "",
    composition_sha256: str = "", more: tuple[str, ...] = (), negative_sha256: str = "",
) -> tuple[str, str]:  # fmt: skip
    """``IP-Adapter 0: "Model: ip-adapter_sd15 [0123456789], Image: a.png: <12 hex>, Weight: 0.8,
    Start: 0, End: 1, Encoder: clip-vit-h [hash]"``, then ``, Weight type: style transfer`` when not
    linear, ``, Mask: m.png: <12 hex>`` when masked, ``, Composition: c.png: <12 hex>``,
    ``, Composition weight: 0.5``, ``, Boost: 1.2``, ``, Layer weights: 3:2.5,6:1`` and (FaceID Plus
    v2) ``, Face weight: 1.5`` when given, ``, Embeds scaling: K+V`` when not V only, ``, Image 2:
    b.png: <12 hex>``... for more pictures (``more``: their SHA-256s) with ``, Combine: average`` when
    not concat, and ``, Negative: n.png: <12 hex>``; a FaceID adapter that reads no CLIP vision has
    no ``Encoder``."""
    text = (
        f"Model: {model}, Image: {_file(use.picture)}: {sha256[:12]}, Weight: {_num(use.weight)}, "
        f"Start: {_num(use.start)}, End: {_num(use.end)}"
    )
    if encoder:
        text += f", Encoder: {encoder}"
    if use.weight_type != "linear":
        text += f", Weight type: {use.weight_type}"
    if use.mask is not None:
        text += f", Mask: {_file(use.mask)}: {mask_sha256[:12]}"
    if use.composition is not None:
        text += f", Composition: {_file(use.composition)}: {composition_sha256[:12]}"
    if use.composition_weight is not None:
        text += f", Composition weight: {_num(use.composition_weight)}"
    if use.boost is not None:
        text += f", Boost: {_num(use.boost)}"
    if use.layer_weights:
        text += f", Layer weights: {show_layer_weights(use.layer_weights)}"
    if use.face_weight is not None:
        text += f", Face weight: {_num(use.face_weight)}"
    if use.scaling != "V only":
        text += f", Embeds scaling: {use.scaling}"
    for n, (picture, digest) in enumerate(zip(use.pictures, more, strict=True), 2):
        text += f", Image {n}: {_file(picture)}: {digest[:12]}"
    if use.combine != "concat":
        text += f", Combine: {use.combine}"
    if use.negative is not None:
        text += f", Negative: {_file(use.negative)}: {negative_sha256[:12]}"
    return f"IP-Adapter {index}", text


_Loaded = tuple[IpAdapterUse, LoadedIpAdapter, LoadedImageEncoder | None, FaceReader | None]


def _load_uses(
    cache: ImagePromptCache, settings: ImageSettings, search: EncoderSearch, family: str,
    check: Callable[[], None],
) -> list[_Loaded]:  # fmt: skip
    """Each image prompt's adapter loaded and checked, with the image encoder it reads with (none
    for a FaceID adapter that reads only the face) and InsightFace's face models (FaceID)."""
    pairs: list[_Loaded] = []
    for use in settings.ip_adapters:
        adapter = cache.adapter(use.path, check)
        check_family(adapter, family)
        blocks = BlockWeights(
            use.weight_type, use.weight, use.composition_weight, use.boost, use.layer_weights,
            use.composition is not None,
        )  # fmt: skip
        blocks.check(adapter.arch.transformers(adapter.module), adapter.path.name)
        encoder = None
        if adapter.embeds != "face":
            encoder = image_encoder_for(
                cache, settings.image_encoder, search, adapter.encoder, adapter.path,
                "an IP-Adapter reads its picture with a CLIP vision model", IP_ADAPTER_ENCODER, check,
            )  # fmt: skip
        check_encoder(adapter, encoder)
        faces = None
        if adapter.variant in FACEID_VARIANTS:
            _one_face(use, adapter)
            faces = cache.face_reader(face_folder(settings.insightface, search.installs, adapter.path))
        pairs.append((use, adapter, encoder, faces))
    return pairs


def _one_face(use: IpAdapterUse, adapter: LoadedIpAdapter) -> None:
    """A FaceID adapter reads one face: more pictures or a negative picture are refused in words."""
    if use.pictures or use.negative is not None:
        raise LoadoutError(
            f"{adapter.path.name} is a FaceID IP-Adapter, which reads the face of one picture",
            why="Loadout reads one face per FaceID image prompt; several pictures, their combination "
            "and a negative picture are for the adapters that read CLIP vision",
            fix="Give the FaceID adapter one picture (another image prompt for another face)",
            code="bad_argument",
        )


def _applied(
    use: IpAdapterUse, adapter: LoadedIpAdapter, encoder: LoadedImageEncoder | None,
    faces: FaceReader | None, sampling: ModelSampling,
) -> AppliedIpAdapter:  # fmt: skip
    """One image prompt with its pictures, face and mask read (refused in words when unreadable)."""
    picture = read_picture(use.picture, "image prompt")
    rng = (sampling.percent_to_sigma(use.start), sampling.percent_to_sigma(use.end))
    mask = None if use.mask is None else torch.from_numpy(read_mask(use.mask))
    comp = None if use.composition is None else read_picture(use.composition, "composition picture")
    more = tuple(read_picture(p, "image prompt") for p in use.pictures)
    negative = None if use.negative is None else read_picture(use.negative, "negative image prompt")
    return AppliedIpAdapter(
        adapter, encoder, picture, use.weight, rng, use.weight_type, mask, comp,
        use.composition_weight, use.boost, use.layer_weights, scaling=use.scaling, pictures=more,
        combine=use.combine, negative=negative,
        face=None if faces is None else read_face(faces, picture, use.picture),
        face_scale=face_scale(adapter, use.weight, use.face_weight),
    )  # fmt: skip


def ip_adapter_pass(
    session: Session, cache: ImagePromptCache, settings: ImageSettings, search: EncoderSearch,
    family: str, sampling: ModelSampling, check: Callable[[], None], named: Callable[[Path, int], str],
) -> tuple[IpAdapterPass | None, dict[str, list[object]], dict[str, str]]:  # fmt: skip
    """This generation's IP-Adapter image prompts: the pass, the modules per phase, and their
    manager names; each adapter reads with the settings' image encoder, or the one found for it."""
    placement = session.placement
    pairs = _load_uses(cache, settings, search, family, check)
    if not pairs:
        return None, {}, {}
    applied, params, names = [], {}, {}
    phases: dict[str, list[object]] = {"text_encode": [], "sample": []}
    for i, (use, adapter, encoder, faces) in enumerate(pairs):
        sha = file_sha256(use.picture)
        applied.append(_applied(use, adapter, encoder, faces, sampling))
        modules = [(adapter.module, f"{adapter.path.stem} IP-Adapter")]
        if encoder is not None:
            modules.append((encoder.module, f"{encoder.path.stem} image encoder"))
        for module, name in modules:
            if placement.active and placement.manager.find(module) is None:
                placement.register(module, name)
            names[name] = "ip_adapter" if module is adapter.module else "image_encoder"
        for face_model in () if faces is None else (faces.files.detector, faces.files.recogniser):
            name = f"{face_model.path.stem} face model"
            keep_in_ram(placement, face_model, name, face_model.path.stat().st_size)
            names[name] = "face_model"
        encoding = (adapter.module,) if encoder is None else (encoder.module, adapter.module)
        for phase, used in (("text_encode", encoding), ("sample", (adapter.module,))):
            phases[phase] += [m for m in used if m not in phases[phase]]
        mask_sha = "" if use.mask is None else file_sha256(use.mask)
        comp_sha = "" if use.composition is None else file_sha256(use.composition)
        neg_sha = "" if use.negative is None else file_sha256(use.negative)
        key, text = parameter_item(
            i, use, named(adapter.path, 10), "" if encoder is None else named(encoder.path, 10), sha,
            mask_sha, comp_sha, tuple(file_sha256(p) for p in use.pictures), neg_sha,
        )  # fmt: skip
        params[key] = text
    made = IpAdapterPass(tuple(applied))
    made.contribution.models = phases
    made.contribution.files = tuple(
        dict.fromkeys(p for _, a, e, _ in pairs for p in (a.path, *(() if e is None else (e.path,))))
    )
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
    weight_type: str = "linear"
    mask: str = ""
    mask_hash: str = ""
    composition: str = ""
    composition_hash: str = ""
    composition_weight: float | None = None
    boost: float | None = None
    layer_weights: tuple[tuple[int, float], ...] = ()
    face_weight: float | None = None
    scaling: str = "V only"
    pictures: tuple[tuple[str, str], ...] = ()  # more pictures: (name, 12 hex)
    combine: str = "concat"
    negative: str = ""
    negative_hash: str = ""


def _named_file(text: str) -> tuple[str, str]:
    """``name.png: <12 hex>`` as (name, hex)."""
    name, _, digest = text.rpartition(":")
    return name.strip(), digest.strip()


def _more_pictures(fields: dict[str, str]) -> tuple[tuple[str, str], ...]:
    found, n = [], 2
    while f"Image {n}" in fields:
        found.append(_named_file(fields[f"Image {n}"]))
        n += 1
    return tuple(found)


def _optional(fields: dict[str, str], key: str) -> float | None:
    return float(fields[key]) if key in fields else None


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
            mask, _, mask_digest = fields.get("Mask", "").rpartition(":")
            comp, _, comp_digest = fields.get("Composition", "").rpartition(":")
            layers = fields.get("Layer weights", "")
            item = IpAdapterParameters(
                fields["Model"], image.strip(), digest.strip(), float(fields.get("Weight", "1")),
                float(fields.get("Start", "0")), float(fields.get("End", "1")), fields.get("Encoder", ""),
                fields.get("Weight type", "linear"), mask.strip(), mask_digest.strip(), comp.strip(),
                comp_digest.strip(), _optional(fields, "Composition weight"), _optional(fields, "Boost"),
                parse_layer_weights(layers) if layers else (), _optional(fields, "Face weight"),
                fields.get("Embeds scaling", "V only"), _more_pictures(fields),
                fields.get("Combine", "concat"), *_named_file(fields.get("Negative", "")),
            )  # fmt: skip
        except (KeyError, ValueError, LoadoutError):
            continue
        found.append((int(key[11:]), item))
    return tuple(item for _, item in sorted(found, key=lambda p: p[0]))
