"""Small ONNX graphs with the signatures of InsightFace's buffalo_l files, written with the onnx
package: an SCRFD detector (input ``input.1`` 1x3xHxW, nine outputs named as det_10g.onnx's: the
scores, boxes and landmarks of strides 8, 16, 32, two anchors per place) whose scores follow the
picture's brightness (a bright patch on black is a face; black is none) with fixed random
variation, and an ArcFace recogniser (``input.1`` Nx3x112x112 -> ``683`` Nx512) that pools the
crop and multiplies it by a fixed random matrix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STRIDES = (8, 16, 32)
#: det_10g.onnx's output names: scores, boxes, landmarks of each stride
SCORE_NAMES, BOX_NAMES, KPS_NAMES = ("448", "471", "494"), ("451", "474", "497"), ("454", "477", "500")
#: the landmark offsets of each anchor, in strides: eyes, nose, mouth corners
KPS_OFFSETS = np.array([-1.0, -0.7, 1.0, -0.7, 0.0, 0.1, -0.8, 1.1, 0.8, 1.1], dtype=np.float32)


def _const(name: str, value: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)


def _head(
    prefix: str,
    stride: int,
    channels: int,
    rng: np.random.Generator,
    nodes: list,
    inits: list,
    weight: np.ndarray,
    bias: np.ndarray,
    post: str | None,
    out: str,
    width: int,
) -> None:
    """Conv (kernel = stride = ``stride``) -> [post op] -> NCHW to rows of ``width`` per anchor."""
    w, b = f"{prefix}_w", f"{prefix}_b"
    inits += [_const(w, weight), _const(b, bias)]
    nodes.append(
        helper.make_node(
            "Conv",
            ["input.1", w, b],
            [f"{prefix}_c"],
            name=f"Conv_{prefix}",
            kernel_shape=[stride, stride],
            strides=[stride, stride],
        )
    )
    last = f"{prefix}_c"
    if post is not None:
        nodes.append(helper.make_node(post, [last], [f"{prefix}_p"], name=f"{post}_{prefix}"))
        last = f"{prefix}_p"
    nodes.append(
        helper.make_node("Transpose", [last], [f"{prefix}_t"], name=f"Transpose_{prefix}", perm=[0, 2, 3, 1])
    )
    shape = f"{prefix}_shape"
    inits.append(numpy_helper.from_array(np.array([-1, width], dtype=np.int64), shape))
    nodes.append(helper.make_node("Reshape", [f"{prefix}_t", shape], [out], name=f"Reshape_{prefix}"))


def detector_graph(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes: list = []
    inits: list = []
    for i, s in enumerate(STRIDES):
        area = 3 * s * s
        # scores: 8 x the patch's mean brightness (in [-1, 1]) + a bias, with random variation: on
        # a bright patch ~1 at stride 32, ~0.6 at 8 and 16 (found, and suppressed near the best)
        w = np.full((2, 3, s, s), 8.0 / area, np.float32) + rng.normal(0, 2.0 / area, (2, 3, s, s)).astype(
            np.float32
        )
        bias = np.array([2.0, 1.5] if s == 32 else [-7.5, -7.6], np.float32)
        _head(f"s{s}", s, 2, rng, nodes, inits, w, bias, "Sigmoid", SCORE_NAMES[i], 1)
        # box sides: |random| + 3 strides at stride 32 (the face), 1.5 at the others
        w = rng.normal(0, 1.0 / area, (8, 3, s, s)).astype(np.float32)
        bname = f"b{s}"
        _head(bname, s, 8, rng, nodes, inits, w, np.zeros(8, np.float32), "Abs", f"{bname}_abs", 4)
        inits.append(_const(f"{bname}_add", np.full((1, 4), 3.0 if s == 32 else 1.5)))
        nodes.append(
            helper.make_node("Add", [f"{bname}_abs", f"{bname}_add"], [BOX_NAMES[i]], name=f"Add_{bname}")
        )
        # landmarks: a face template around each anchor + random variation
        w = rng.normal(0, 0.3 / area, (20, 3, s, s)).astype(np.float32)
        _head(f"k{s}", s, 20, rng, nodes, inits, w, np.tile(KPS_OFFSETS, 2), None, KPS_NAMES[i], 10)
    inp = helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, "?", "?"])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 1]) for n in SCORE_NAMES]
    outs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 4]) for n in BOX_NAMES]
    outs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 10]) for n in KPS_NAMES]
    graph = helper.make_graph(nodes, "main_graph", [inp], outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)


def recogniser_graph(seed: int = 1, size: int = 112, own_norm: bool = False) -> onnx.ModelProto:
    """``own_norm``: the graph starts by normalising its input itself (nodes ``Sub_0``, ``Mul_1``:
    (x - 127.5) * 0.0078125, as older ArcFace exports), which insightface tells by those names."""
    rng = np.random.default_rng(seed)
    pooled = 3 * (size // 4) ** 2
    inits = [
        _const("fc_w", rng.normal(0, 1.0 / np.sqrt(pooled), (pooled, 512))),
        _const("fc_b", rng.normal(0, 0.1, 512)),
    ]
    first: list = []
    source = "input.1"
    if own_norm:
        inits += [_const("mean", np.array(127.5)), _const("scale", np.array(0.0078125))]
        first = [
            helper.make_node("Sub", ["input.1", "mean"], ["sub"], name="Sub_0"),
            helper.make_node("Mul", ["sub", "scale"], ["normed"], name="Mul_1"),
        ]
        source = "normed"
    nodes = [
        *first,
        helper.make_node(
            "AveragePool", [source], ["pool"], name="AveragePool_2", kernel_shape=[4, 4], strides=[4, 4]
        ),
        helper.make_node("Flatten", ["pool"], ["flat"], name="Flatten_1", axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["683"], name="Gemm_2"),
    ]
    inp = helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [None, 3, size, size])
    out = helper.make_tensor_value_info("683", TensorProto.FLOAT, [1, 512])
    graph = helper.make_graph(nodes, "main_graph", [inp], [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)


def write_buffalo(folder: Path) -> Path:
    """A buffalo_l-like folder: det_10g.onnx and w600k_r50.onnx."""
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(detector_graph(), str(folder / "det_10g.onnx"))
    onnx.save(recogniser_graph(), str(folder / "w600k_r50.onnx"))
    return folder


def face_picture(
    height: int = 300, width: int = 400, box: tuple[int, int, int, int] = (150, 90, 250, 210)
) -> np.ndarray:
    """A (H, W, 3) uint8 RGB picture: a dark, slightly noisy background and a bright "face"
    (x1, y1, x2, y2) with dark eyes and mouth."""
    rng = np.random.default_rng(7)
    pic = rng.integers(0, 30, (height, width, 3)).astype(np.uint8)
    x1, y1, x2, y2 = box
    pic[y1:y2, x1:x2] = rng.integers(200, 256, (y2 - y1, x2 - x1, 3)).astype(np.uint8)
    w, h = x2 - x1, y2 - y1
    for cx, cy in ((0.3, 0.35), (0.7, 0.35)):
        pic[y1 + int(cy * h) - 5 : y1 + int(cy * h) + 5, x1 + int(cx * w) - 8 : x1 + int(cx * w) + 8] = 40
    pic[y1 + int(0.75 * h) - 4 : y1 + int(0.75 * h) + 4, x1 + int(0.3 * w) : x1 + int(0.7 * w)] = (
        150,
        20,
        20,
    )
    return pic
