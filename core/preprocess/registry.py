"""The preprocessor records and the one call that runs them by name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import torch
from torch import nn

from core.errors import LoadoutError
from core.preprocess import depth, dwpose, edges, normal, normal_bae, pose, pose_whole
from core.preprocess.onnx_models import DWPOSE_FILES, OnnxFile, OnnxModel
from core.values import NumberRange


class UnknownPreprocessorError(LoadoutError):
    code = "bad_argument"


@dataclass(frozen=True)
class Setting:
    """One number a preprocessor takes: its name, default and allowed range."""

    name: str
    default: float
    limits: NumberRange


Run = Callable[[np.ndarray, Mapping[str, float]], np.ndarray]
ModelHint = Callable[
    [nn.Module, np.ndarray, Mapping[str, float], torch.device, Callable[[], None]], np.ndarray
]
#: (its ONNX sessions by family, picture, settings, stop check) -> hint
OnnxHint = Callable[
    [Mapping[str, OnnxModel], np.ndarray, Mapping[str, float], Callable[[], None]], np.ndarray
]


@dataclass(frozen=True)
class ModelNeed:
    """Another model file a preprocessor runs beside its main one (OpenPose's hand and face
    networks beside the body's)."""

    family: str
    title: str  # "an OpenPose hand model"
    source: str  # where such a file is published and how to make it readable
    #: the largest (rows, cols) the network sees in one run, for its activation room
    input_size: tuple[int, int]


@dataclass(frozen=True)
class Preprocessor:
    """``run`` makes the hint; for one that needs a model file (``model_family``: the family its
    files are detected as), ``run`` is None and the caller's :data:`ModelRun` makes it with the
    model it loaded and placed (:mod:`core.preprocess.placed`)."""

    name: str
    description: str
    run: Run | None
    settings: tuple[Setting, ...] = ()
    model_family: str | None = None
    model_title: str = ""  # what a person calls its model files ("a Depth Anything V2 model")
    #: where such a file is published and how to make it readable (said when none is found)
    model_source: str = ""
    #: (placed network, picture, settings, device, stop check) -> hint, for a model preprocessor
    model_hint: ModelHint | None = None
    #: (height, width, settings) -> the size the network runs at, for its activation room
    model_input: Callable[[int, int, Mapping[str, float]], tuple[int, int]] | None = None
    #: other names of the same preprocessor (sd-webui-controlnet's module names in A1111 PNGs)
    aliases: tuple[str, ...] = ()
    #: the model files it runs beside the main one; with any, ``model_hint`` is handed the placed
    #: networks as one ``nn.ModuleDict`` by family id (the main one's included)
    more_models: tuple[ModelNeed, ...] = ()
    #: for one that runs ONNX graphs (dwpose): the files it needs, one per family, and its hint
    onnx_files: tuple[OnnxFile, ...] = ()
    onnx_hint: OnnxHint | None = None

    @property
    def model_families(self) -> tuple[str, ...]:
        """Every model family it needs, the main one first (none: it needs no model)."""
        if self.model_family is None:
            return ()
        return (self.model_family, *(m.family for m in self.more_models))

    def resolved(self, given: Mapping[str, float]) -> dict[str, float]:
        """The settings with ``given`` over the defaults, each checked; an unknown name is refused."""
        known = {s.name: s for s in self.settings}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise LoadoutError(
                f"the {self.name} preprocessor has no setting {', '.join(unknown)}",
                why=f"its settings are {', '.join(known) or 'none'}",
                fix="Use one of its settings",
                code="bad_argument",
            )
        return {n: s.limits.check(given.get(n, s.default)) for n, s in known.items()}


def _threshold(name: str) -> NumberRange:
    return NumberRange(f"the canny {name} threshold", 0, 1000, integer=True)


def _part(name: str) -> NumberRange:
    return NumberRange(f"the dwpose {name} switch (1: drawn, 0: left out)", 0, 1, integer=True)


#: (record, picture, resolved settings) -> hint: a model preprocessor run with its model
ModelRun = Callable[[Preprocessor, np.ndarray, Mapping[str, float]], np.ndarray]


_DEPTH_SOURCE = (
    "model.safetensors of depth-anything/Depth-Anything-V2-Small-hf (or -Base-hf, -Large-hf) on Hugging Face"
)


def _annotator(file: str) -> str:
    return f"{file} of lllyasviel/Annotators on Hugging Face, converted to safetensors with Loadout's convert"


_BODY_SOURCE = f"{_annotator('body_pose_model.pth')} (DWPose's ONNX files are the dwpose preprocessor's)"
_HAND = ModelNeed(
    "openpose-hand", "an OpenPose hand model", _annotator("hand_pose_model.pth"), pose_whole.HAND_INPUT
)
_FACE = ModelNeed("openpose-face", "an OpenPose face model", _annotator("facenet.pth"), pose_whole.FACE_INPUT)


def _registry(*records: Preprocessor) -> Mapping[str, Preprocessor]:
    out: dict[str, Preprocessor] = {}
    for r in records:
        if r.name in out:
            raise ValueError(f"preprocessor {r.name!r} registered twice")
        out[r.name] = r
    return MappingProxyType(out)


PREPROCESSORS: Mapping[str, Preprocessor] = _registry(
    Preprocessor(
        "canny", "white edges on black (OpenCV's Canny on the grey picture)", edges.canny,
        (Setting("low", 100, _threshold("low")), Setting("high", 200, _threshold("high"))),
    ),
    Preprocessor(
        "lineart", "white line drawing on black (difference of Gaussians, thresholded)", edges.lineart,
        (Setting("sigma", 1.0, NumberRange("the lineart line width", 0.3, 8.0)),),
    ),
    Preprocessor(
        "softedge", "soft white edges on black (Sobel gradient strength, normalized)", edges.softedge,
        (Setting("blur", 1.5, NumberRange("the softedge blur", 0.0, 8.0)),),
    ),
    Preprocessor(
        "depth", "relative depth, near is white (Depth Anything V2 from a model file)", None,
        (Setting("resolution", 518, NumberRange("the depth resolution", 140, 2044, integer=True)),),
        model_family="depth-anything-v2", model_title="a Depth Anything V2 model",
        model_source=_DEPTH_SOURCE,
        model_hint=depth.depth_map, aliases=("depth_anything_v2",),
        model_input=lambda h, w, s: depth.input_size(h, w, int(s["resolution"])),
    ),
    Preprocessor(
        "normal", "surface normals from the depth in NormalBAE's colours (Depth Anything V2 model file)",
        None,
        (
            Setting("resolution", 518, NumberRange("the normal resolution", 140, 2044, integer=True)),
            Setting("strength", normal.STRENGTH, NumberRange("the normal flatness", 0.01, 100.0)),
            Setting("background", normal.BACKGROUND, NumberRange("the normal background cut", 0.0, 1.0)),
        ),
        model_family="depth-anything-v2", model_title="a Depth Anything V2 model",
        model_source=_DEPTH_SOURCE, model_hint=normal.normal_map,
        model_input=lambda h, w, s: depth.input_size(h, w, int(s["resolution"])),
    ),
    Preprocessor(
        "openpose", "body skeletons in OpenPose's colours on black (OpenPose body from a model file)", None,
        (Setting("resolution", 512, NumberRange("the pose resolution", 64, 2048, integer=True)),),
        model_family="openpose-body", model_title="an OpenPose body model",
        model_source=_BODY_SOURCE,
        model_hint=pose.pose_map, aliases=("pose", "openpose_body"),
        model_input=lambda h, w, s: pose.input_size(h, w, int(s["resolution"])),
    ),
    *(
        Preprocessor(
            name, f"{what} in OpenPose's colours on black (OpenPose {nets} from model files)", None,
            (Setting("resolution", 512, NumberRange("the pose resolution", 64, 2048, integer=True)),),
            model_family="openpose-body", model_title="an OpenPose body model", model_source=_BODY_SOURCE,
            model_hint=pose_whole.whole_map(body=name != "openpose_faceonly", hands=_HAND in more,
                                            face=_FACE in more),
            model_input=lambda h, w, s: pose.input_size(h, w, int(s["resolution"])),
            more_models=more,
        )
        for name, what, nets, more in (
            ("openpose_full", "body skeletons, hands and faces", "body, hand and face", (_HAND, _FACE)),
            ("openpose_hand", "body skeletons and hands", "body and hand", (_HAND,)),
            ("openpose_face", "body skeletons and faces", "body and face", (_FACE,)),
            ("openpose_faceonly", "faces (found through their bodies)", "body and face", (_FACE,)),
        )
    ),
    Preprocessor(
        "normalbae", "surface normals in NormalBAE's colours (the NormalBAE network from a model file)", None,
        (Setting("resolution", 512, NumberRange("the normalbae resolution", 64, 2048, integer=True)),),
        model_family="normalbae", model_title="a NormalBAE model",
        model_source="scannet.pt of lllyasviel/Annotators on Hugging Face, converted to safetensors with "
        "Loadout's convert",
        model_hint=normal_bae.normal_map, aliases=("normal_bae",),
        model_input=lambda h, w, s: normal_bae.input_size(h, w, int(s["resolution"])),
    ),
    Preprocessor(
        "dwpose", "whole-body poses (body, hands, face) in OpenPose's colours on black (DWPose's ONNX files)",
        None,
        tuple(Setting(part, 1, _part(part)) for part in ("body", "hands", "face")),
        model_family="dwpose", model_title="DWPose's two ONNX files",
        model_source="yolox_l.onnx and dw-ll_ucoco_384.onnx of yzd-v/DWPose on Hugging Face",
        aliases=("dw_openpose_full", "dwpose_full"), onnx_files=DWPOSE_FILES, onnx_hint=dwpose.dwpose_map,
    ),
)  # fmt: skip


def preprocessor_named(name: str) -> str | None:
    """The preprocessor ``name`` or one of its aliases names (None: none)."""
    key = name.strip().lower()
    if key in PREPROCESSORS:
        return key
    return next((p.name for p in PREPROCESSORS.values() if key in p.aliases), None)


def find_preprocessor(name: str) -> Preprocessor:
    known = preprocessor_named(name)
    found = PREPROCESSORS.get(known) if known is not None else None
    if found is None:
        raise UnknownPreprocessorError(
            f"there is no preprocessor {name!r}",
            why=f"the preprocessors are {', '.join(PREPROCESSORS)}",
            fix="Use one of them",
        )
    return found


class MissingPreprocessorModelError(LoadoutError):
    code = "missing_file"


def missing_model(record: Preprocessor, family: str | None = None) -> MissingPreprocessorModelError:
    """The refusal of ``record`` without its model file of ``family`` (None: its main one)."""
    if record.onnx_files:
        return MissingPreprocessorModelError(
            f"the {record.name} preprocessor needs {' and '.join(f.file for f in record.onnx_files)} "
            f"({record.model_title}), and they were not given or found",
            why="it makes the hint with the two networks those files hold",
            fix=f"Download {record.model_source}; give both files, or put them in a folder of the library",
        )
    title, source = record.model_title, record.model_source
    for need in record.more_models:
        if need.family == family:
            title, source = need.title, need.source
    return MissingPreprocessorModelError(
        f"the {record.name} preprocessor needs {title} file, and none was given or found",
        why="it makes the hint with a network whose weights come from that file",
        fix=f"Download {source}; give that file, or put it in a folder of the library",
    )


def preprocess(
    name: str,
    picture: np.ndarray,
    settings: Mapping[str, float] | None = None,
    *,
    model: ModelRun | None = None,
) -> np.ndarray:
    """The hint (H, W, 3) uint8 that preprocessor ``name`` makes of ``picture`` ((H, W, 3) uint8);
    ``model`` runs the ones that need a model file."""
    record = find_preprocessor(name)
    if picture.ndim != 3 or picture.shape[2] < 3 or picture.dtype != np.uint8:
        raise LoadoutError(
            f"a preprocessor takes an RGB picture, not an array of {picture.shape} {picture.dtype}",
            fix="Read the picture as RGB",
            code="bad_argument",
        )
    resolved = record.resolved(settings or {})
    rgb = np.ascontiguousarray(picture[..., :3])
    if record.run is not None:
        hint = record.run(rgb, resolved)
    elif model is None:
        raise missing_model(record)
    else:
        hint = model(record, rgb, resolved)
    assert hint.shape == (*picture.shape[:2], 3) and hint.dtype == np.uint8
    return hint
