"""InsightFace's face analysis run by Loadout (core/faces) against insightface's own FaceAnalysis
(the 2.1 wheel, a test-only reference) on small ONNX graphs with buffalo_l's signatures
(face_graphs.py): every detection, the best face's box, landmarks, score, embedding and normed
embedding equal bit for bit; the aligned crops at 112, 224 and 256 equal norm_crop's; the files
told by their signature; missing, incomplete and damaged folders and a picture without a face
refused in words."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

from core.errors import LoadoutError
from core.faces.align import align_face, similarity, template
from core.faces.analysis import open_face_reader, rgb_to_bgr
from core.faces.detector import detect_faces
from tests.core.faces.face_graphs import face_picture, recogniser_graph, write_buffalo

insightface_app = pytest.importorskip("insightface.app")
face_align = pytest.importorskip("insightface.utils.face_align")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_buffalo(tmp_path_factory.mktemp("insightface") / "models" / "buffalo_l")


@pytest.fixture(scope="module")
def reference(folder: Path):
    app = insightface_app.FaceAnalysis(name=str(folder), providers=["CPUExecutionProvider"])
    app.prepare(ctx_id=0, det_size=(640, 640))  # ComfyUI_IPAdapter_plus's insightface_loader
    return app


@pytest.fixture(scope="module")
def bgr() -> np.ndarray:
    return rgb_to_bgr(face_picture())


def test_face_equals_insightface(folder: Path, reference, bgr: np.ndarray) -> None:
    reader = open_face_reader(folder)
    assert (reader.mean, reader.std) == (127.5, 127.5)
    face = reader.read(bgr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # scikit-image's estimate, in insightface
        faces = reference.get(bgr)
    best = faces[0]
    np.testing.assert_array_equal(face.box, best.bbox)
    np.testing.assert_array_equal(face.landmarks, best.kps)
    assert face.score == float(best.det_score)
    np.testing.assert_array_equal(face.embedding, best.embedding)
    np.testing.assert_array_equal(face.normed_embedding, best.normed_embedding)
    assert face.detection_size == 640
    # the known face: the best box is a stride-32 anchor's (3 strides each side, 192 px at 640 on
    # this 400-wide picture: 120 px) centred on the bright square (150..250, 90..210)
    cx, cy = (face.box[0] + face.box[2]) / 2, (face.box[1] + face.box[3]) / 2
    assert 150 <= cx <= 250 and 90 <= cy <= 210
    assert 110 < face.box[2] - face.box[0] < 135 and 110 < face.box[3] - face.box[1] < 135
    eyes, mouth = face.landmarks[:2], face.landmarks[3:]
    assert eyes[0, 0] < eyes[1, 0] and mouth[:, 1].min() > eyes[:, 1].max()


def test_every_detection_equals_insightface(folder: Path, reference, bgr: np.ndarray) -> None:
    reader = open_face_reader(folder)
    for size in (640, 320):
        found = detect_faces(reader.files.detector, bgr, size)
        det, kps = reference.det_model.detect(bgr, input_size=(size, size))
        assert len(found) == det.shape[0] > 1  # several, suppression kept the ones apart
        np.testing.assert_array_equal(found.boxes, det[:, :4])
        np.testing.assert_array_equal(found.scores, det[:, 4])
        np.testing.assert_array_equal(found.landmarks, kps)


def test_alignment_equals_norm_crop(bgr: np.ndarray) -> None:
    marks = np.array(
        [[150.3, 120.1], [190.7, 118.2], [171.2, 140.9], [155.5, 165.0], [186.1, 163.8]], np.float32
    )
    for size in (112, 224, 256):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            expected = face_align.norm_crop(bgr, landmark=marks, image_size=size)
            matrix = face_align.estimate_norm(marks, size)
        np.testing.assert_allclose(similarity(marks, template(size)), matrix, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(align_face(bgr, marks, size), expected)


def test_own_normalisation_told_by_node_names(tmp_path: Path, folder: Path) -> None:
    other = tmp_path / "antelope"
    other.mkdir()
    (other / "det_10g.onnx").write_bytes((folder / "det_10g.onnx").read_bytes())
    onnx.save(recogniser_graph(own_norm=True), str(other / "w600k_r50.onnx"))
    reader = open_face_reader(other)
    assert (reader.mean, reader.std) == (0.0, 1.0)
    ref = insightface_app.FaceAnalysis(name=str(other), providers=["CPUExecutionProvider"])
    assert (ref.models["recognition"].input_mean, ref.models["recognition"].input_std) == (0.0, 1.0)


def test_no_face_refused(folder: Path, reference) -> None:
    black = np.zeros((200, 300, 3), np.uint8)
    assert reference.get(black) == []
    with pytest.raises(LoadoutError) as e:
        open_face_reader(folder).read(black, "black.png")
    assert e.value.code == "no_face" and "black.png" in str(e.value)


def test_missing_incomplete_damaged_refused(tmp_path: Path, folder: Path) -> None:
    with pytest.raises(LoadoutError) as e:
        open_face_reader(tmp_path / "nowhere")
    assert e.value.code == "missing_file" and "models/insightface/models/buffalo_l" in str(e.value)
    half = tmp_path / "half"
    half.mkdir()
    (half / "det_10g.onnx").write_bytes((folder / "det_10g.onnx").read_bytes())
    (half / "notes.onnx").write_bytes((folder / "det_10g.onnx").read_bytes())
    with pytest.raises(LoadoutError) as e:
        open_face_reader(half)
    assert e.value.code == "missing_file" and "recogniser" in str(e.value) and "detector" not in e.value.what
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "det_10g.onnx").write_bytes(b"not a graph at all" * 10)
    with pytest.raises(LoadoutError) as e:
        open_face_reader(bad)
    assert e.value.code == "not_a_model" and "det_10g.onnx" in str(e.value)
