"""A face's identity as ComfyUI_IPAdapter_plus reads it for FaceID: insightface's ``FaceAnalysis``
(buffalo_l, ``prepare(det_size=(640, 640))``) on the picture in BGR order, detection tried at 640
and, when no face is found, at 576, 512, 448, 384 and 320 (the pack's loop); the best-scoring face
after suppression (insightface's ``faces[0]``); its ArcFace embedding from the 112 x 112 aligned
crop (``embedding``) and that divided by its length (``normed_embedding``, what FaceID reads), and
its landmarks, from which FaceID Plus crops the face for CLIP vision (:func:`face_crop`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.errors import LoadoutError
from core.faces.align import align_face
from core.faces.detector import detect_faces
from core.faces.files import FaceModelFiles, OnnxModel, face_model_files, recogniser_size
from core.faces.onnx_nodes import first_node_names
from core.preprocess.edges import _cv2

#: the detection sizes ComfyUI_IPAdapter_plus tries, in order (range(640, 256, -64))
DETECTION_SIZES = (640, 576, 512, 448, 384, 320)


@dataclass(frozen=True)
class Face:
    box: np.ndarray  # x1 y1 x2 y2 in the picture
    score: float
    landmarks: np.ndarray  # (5, 2): eyes, nose, mouth corners
    embedding: np.ndarray  # (512,) float32
    detection_size: int

    @property
    def normed_embedding(self) -> np.ndarray:
        out: np.ndarray = self.embedding / np.linalg.norm(self.embedding)
        return out


def _normalisation(model: OnnxModel) -> tuple[float, float]:
    """insightface's rule: a graph whose first 8 nodes subtract and multiply normalises its own
    input (mean 0, std 1); else (x - 127.5) / 127.5 (w600k_r50)."""
    try:
        names = first_node_names(model.path)
    except (ValueError, OSError):
        names = ()
    sub = any(n.startswith(("Sub", "_minus")) for n in names)
    mul = any(n.startswith(("Mul", "_mul")) for n in names)
    return (0.0, 1.0) if sub and mul else (127.5, 127.5)


@dataclass(frozen=True)
class FaceReader:
    """InsightFace's detector and recogniser, opened once (:func:`open_face_reader`)."""

    files: FaceModelFiles
    mean: float
    std: float

    def embedding(self, aligned: np.ndarray) -> np.ndarray:
        """The recogniser's embedding of an aligned crop (BGR uint8)."""
        model = self.files.recogniser
        size = aligned.shape[0]
        blob = _cv2().dnn.blobFromImage(
            aligned, 1.0 / self.std, (size, size), (self.mean, self.mean, self.mean), swapRB=True
        )
        out: np.ndarray = np.asarray(model.run(np.ascontiguousarray(blob, dtype=np.float32))[0]).reshape(-1)
        return out

    def read(self, bgr: np.ndarray, name: str = "the picture") -> Face:
        """The best face of ``bgr`` ((H, W, 3) uint8, BGR order), refused in words when none."""
        size = recogniser_size(self.files.recogniser) or 112
        for det_size in DETECTION_SIZES:
            found = detect_faces(self.files.detector, bgr, det_size)
            if len(found):
                marks = found.landmarks[0]
                emb = self.embedding(align_face(bgr, marks, size))
                return Face(found.boxes[0], float(found.scores[0]), marks, emb, det_size)
        raise LoadoutError(
            f"no face was found in {name}",
            why="FaceID reads the identity of a face, and InsightFace's detector found none at any "
            f"of its sizes ({', '.join(map(str, DETECTION_SIZES))})",
            fix="Give a picture where one face is clearly visible, facing the camera, not too small",
            code="no_face",
        )


def open_face_reader(folder: Path) -> FaceReader:
    """The InsightFace files in ``folder`` opened (refused in words when missing or damaged)."""
    files = face_model_files(folder)
    mean, std = _normalisation(files.recogniser)
    return FaceReader(files, mean, std)


def rgb_to_bgr(picture: np.ndarray) -> np.ndarray:
    """A (H, W, 3) RGB picture in the BGR order insightface reads (the pack's ``tensor_to_image``)."""
    return np.ascontiguousarray(picture[..., ::-1])


def face_crop(picture: np.ndarray, face: Face, size: int) -> np.ndarray:
    """The face cropped to ``size`` x ``size`` by its landmarks (``norm_crop``: 224 for SD1.5's
    FaceID Plus, 256 for SDXL's), in the picture's own channel order."""
    return align_face(picture, face.landmarks, size)
