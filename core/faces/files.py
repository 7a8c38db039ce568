"""InsightFace's ONNX model files, told by their signature as insightface's model zoo tells them:
a **detector** (SCRFD: one 4-D 3-channel picture input, 9 outputs: a score, a box and 5 landmarks
for each of the strides 8, 16, 32, two anchors per place) and a **recogniser** (ArcFace: one
square 3-channel input, 112 or a larger multiple of 16, one output of 512 per face). Landmark,
gender/age and swapper models beside them are not used. Every failure is said in words: the
folder missing, a file that is not an ONNX graph onnxruntime can run, a folder without one of the
two."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import LoadoutError
from core.files.onnx_session import open_session

#: where artists keep the files (ComfyUI_IPAdapter_plus's insightface_loader reads this folder)
FOLDER_HINT = "ComfyUI's models/insightface/models/buffalo_l"
#: where they come from
SOURCE_HINT = (
    "the buffalo_l pack of deepinsight/insightface's model zoo (buffalo_l.zip, unpacked: det_10g.onnx "
    "and w600k_r50.onnx)"
)
#: the detector's outputs: score, box, landmarks for each stride
DETECTOR_OUTPUTS = 9
EMBEDDING = 512


@dataclass(frozen=True)
class OnnxModel:
    """One ONNX file opened for running: its session, input name and shape, output names, and
    the names of its first nodes (ArcFace's own normalisation is told by them)."""

    path: Path
    session: Any
    input_name: str
    input_shape: tuple[object, ...]
    outputs: tuple[str, ...]
    output_shapes: tuple[tuple[object, ...], ...]

    def run(self, blob: Any) -> list[Any]:
        out: list[Any] = self.session.run(list(self.outputs), {self.input_name: blob})
        return out


def open_onnx(path: Path) -> OnnxModel:
    """``path`` opened with onnxruntime on the CPU; a file it cannot read is refused in words."""
    session = open_session(path, "reading faces", f"Download it again: {SOURCE_HINT}", "not_a_model")
    inputs, outputs = session.get_inputs(), session.get_outputs()
    first = inputs[0] if inputs else None
    return OnnxModel(
        path, session, "" if first is None else str(first.name),
        () if first is None else tuple(first.shape) if len(inputs) == 1 else (),
        tuple(str(o.name) for o in outputs), tuple(tuple(o.shape) for o in outputs),
    )  # fmt: skip


def _dim(value: object) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def is_detector(model: OnnxModel) -> bool:
    """SCRFD with landmarks (insightface: at least 5 outputs is a detector; 9 is strides 8, 16,
    32 with keypoints, the only layout buffalo_l and antelopev2 ship)."""
    shape = model.input_shape
    return len(shape) == 4 and shape[1] == 3 and len(model.outputs) == DETECTOR_OUTPUTS


def recogniser_size(model: OnnxModel) -> int | None:
    """The square input size of an ArcFace recogniser (112 for w600k_r50), or None."""
    shape = model.input_shape
    if len(shape) != 4 or shape[1] != 3 or len(model.outputs) != 1:
        return None
    h, w = _dim(shape[2]), _dim(shape[3])
    out = model.output_shapes[0]
    if h is None or h != w or h < 112 or h % 16 or h in (192,) or not out or out[-1] != EMBEDDING:
        return None
    return h


@dataclass(frozen=True)
class FaceModelFiles:
    detector: OnnxModel
    recogniser: OnnxModel


def missing_folder(folder: Path | None, looked: Sequence[Path] = ()) -> LoadoutError:
    where = f"{folder} does not exist" if folder is not None else "no InsightFace folder was found"
    if looked:
        where += " (looked in " + ", ".join(str(p) for p in looked) + ")"
    return LoadoutError(
        "a FaceID IP-Adapter needs InsightFace's face models, and they were not found",
        why=where,
        fix=f"Put the buffalo_l files in {FOLDER_HINT} (they come from {SOURCE_HINT}), or name their folder",
        code="missing_file",
    )


def face_model_files(folder: Path) -> FaceModelFiles:
    """The detector and the recogniser in ``folder`` (the first of each in name order, as
    insightface's FaceAnalysis takes them), opened; refused in words when one is missing."""
    folder = Path(folder)
    if not folder.is_dir():
        raise missing_folder(folder)
    detector = recogniser = None
    for path in sorted(folder.glob("*.onnx")):
        model = open_onnx(path)
        if detector is None and is_detector(model):
            detector = model
        elif recogniser is None and recogniser_size(model) is not None:
            recogniser = model
    if detector is None or recogniser is None:
        lacking = " and ".join(
            n for n, m in (("a face detector (SCRFD, det_10g.onnx)", detector),
                           ("a face recogniser (ArcFace, w600k_r50.onnx)", recogniser)) if m is None
        )  # fmt: skip
        raise LoadoutError(
            f"{folder} has no {lacking}",
            why="FaceID reads the face with InsightFace's detector and its identity embedding",
            fix=f"Put the buffalo_l files there ({SOURCE_HINT}); ComfyUI keeps them in {FOLDER_HINT}",
            code="missing_file",
        )
    return FaceModelFiles(detector, recogniser)
