"""The ONNX files a preprocessor runs (DWPose's person detector and whole-body pose model): known by
their graph's signature (:func:`core.files.onnx.read_onnx_signature`), not their names; any other
ONNX file refused in words. Run with ONNX Runtime's CPU execution provider (``onnxruntime``).

How the memory manager sees them: an ONNX Runtime session is not a torch module, so the manager
cannot move, stream or split it; the session holds its weights in RAM and computes on the CPU.
Each session is registered with the manager as a RAM-resident model of the file's size (never
placed on the device), named "<file> preprocessor", with a "keep" event that says so; it is
forgotten when the session lets the file go. The CUDA execution provider (``onnxruntime-gpu``) is
not used even where it is installed: its memory would sit on the card outside the manager's plan.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from core.errors import FileFormatError, LoadoutError
from core.files.onnx import OnnxSignature, read_onnx_signature
from core.files.onnx_session import open_session
from core.units import gib

if TYPE_CHECKING:
    from core.session.placement import Placement

ROLE = "preprocessor_model"
DETECTOR = "dwpose-detector"
POSE = "dwpose-wholebody"
WHOLEBODY_POINTS = 133
YOLOX_COLUMNS = 85  # box (4), objectness, 80 COCO classes
STRIDES = (8, 16, 32)


@dataclass(frozen=True)
class OnnxFile:
    """A file a preprocessor needs: its family, the name it is published under, what it is, where
    to get it."""

    family: str
    file: str
    title: str
    source: str


DWPOSE_FILES = (
    OnnxFile(DETECTOR, "yolox_l.onnx", "DWPose's person detector (YOLOX-L)",
             "yolox_l.onnx of yzd-v/DWPose on Hugging Face"),
    OnnxFile(POSE, "dw-ll_ucoco_384.onnx", "DWPose's whole-body pose model (RTMPose-l, 133 keypoints)",
             "dw-ll_ucoco_384.onnx of yzd-v/DWPose on Hugging Face"),
)  # fmt: skip


def _ints(shape: tuple[int | str, ...]) -> tuple[int, ...] | None:
    return tuple(d for d in shape if isinstance(d, int)) if all(isinstance(d, int) for d in shape) else None


def _is_detector(sig: OnnxSignature) -> bool:
    if len(sig.inputs) != 1 or len(sig.outputs) != 1:
        return False
    inp, out = sig.inputs[0].shape, sig.outputs[0].shape
    if len(inp) != 4 or inp[1] != 3 or len(out) != 3 or out[2] != YOLOX_COLUMNS:
        return False
    side = inp[2]
    if not isinstance(side, int) or inp[3] != side or side % 32:
        return False
    return out[1] == sum((side // s) ** 2 for s in STRIDES)


def _is_pose(sig: OnnxSignature) -> bool:
    outs = {t.name: t.shape for t in sig.outputs}
    if len(sig.inputs) != 1 or "simcc_x" not in outs or "simcc_y" not in outs:
        return False
    inp = _ints(sig.inputs[0].shape[1:])
    if inp is None or len(inp) != 3 or inp[0] != 3:
        return False
    x, y = outs["simcc_x"], outs["simcc_y"]
    rows, cols = inp[1], inp[2]
    return (
        len(x) == 3 == len(y) and x[1] == y[1] == WHOLEBODY_POINTS and x[2] == 2 * cols and y[2] == 2 * rows
    )


def onnx_family(sig: OnnxSignature) -> str | None:
    """The family of the graph with this signature (None: none Loadout runs)."""
    return DETECTOR if _is_detector(sig) else POSE if _is_pose(sig) else None


def recognise(path: Path) -> str:
    """The family of the ONNX file at ``path``; another ONNX graph (or a damaged file) is refused
    in words saying what it is and what to use."""
    sig = read_onnx_signature(path)
    family = onnx_family(sig)
    if family is None:
        raise FileFormatError(
            f"{Path(path).name} is an ONNX model Loadout does not run ({sig.describe()})",
            why="the ONNX files Loadout runs are DWPose's: the person detector (images 1x3x640x640 -> "
            "1x8400x85) and the whole-body pose model (input 1x3x384x288 -> simcc_x 1x133x576, "
            "simcc_y 1x133x768)",
            fix="For the dwpose preprocessor give yolox_l.onnx and dw-ll_ucoco_384.onnx of yzd-v/DWPose "
            "on Hugging Face; for other preprocessors give their safetensors model files",
            code="unsupported_format",
        )
    return family


def onnx_entries(roots: Iterable[Path]) -> list[tuple[Path, str, str]]:
    """(path, kind, family) of every ONNX file under ``roots`` that Loadout runs (the library lists
    safetensors and pickles; ONNX files are looked for here, when a preprocessor needs one)."""
    out = []
    for path in _onnx_files(roots):
        try:
            family = onnx_family(read_onnx_signature(path))
        except LoadoutError:
            continue
        if family is not None:
            out.append((path, ROLE, family))
    return out


def _onnx_files(roots: Iterable[Path]) -> Iterator[Path]:
    seen: set[Path] = set()
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if name.lower().endswith(".onnx") and path not in seen:
                    seen.add(path)
                    yield path


@dataclass(eq=False)
class OnnxModel:
    """An ONNX file's session (CPU), by family."""

    path: Path
    family: str
    session: Any
    nbytes: int

    @property
    def name(self) -> str:
        """What the memory manager calls it."""
        return f"{self.path.stem} preprocessor"

    @property
    def input_size(self) -> tuple[int, int]:
        """The (rows, cols) its one input takes (fixed in both DWPose graphs)."""
        shape = self.session.get_inputs()[0].shape
        return int(shape[2]), int(shape[3])

    def run(self, x: np.ndarray) -> list[np.ndarray]:
        """The graph's outputs for its one input ``x``, in the graph's output order."""
        feed = {self.session.get_inputs()[0].name: x}
        return [np.asarray(o) for o in self.session.run(None, feed)]


def load_onnx(path: Path, family: str) -> OnnxModel:
    """``path``'s session on the CPU; a file ONNX Runtime cannot build is refused in words."""
    session = open_session(path, "the dwpose preprocessor", "Download the file again")
    return OnnxModel(Path(path), family, session, Path(path).stat().st_size)


def account(placement: Placement, model: OnnxModel) -> None:
    """Register ``model`` with the manager as a RAM-resident model (once), with its "keep" event."""
    keep_in_ram(placement, model, model.name, model.nbytes)


def keep_in_ram(placement: Placement, model: object, name: str, nbytes: int) -> None:
    """Register an ONNX model (any object holding a session) with the manager as ``name``, a
    RAM-resident model of ``nbytes`` (once), with its "keep" event saying why it is not placed."""
    if not placement.active or placement.manager.find(model) is not None:
        return
    placement.manager.register(model, name, sizes=(("", nbytes),), dtype="fp32")
    placement.events.emit(
        "keep", name, nbytes,
        f"{name} stays in RAM ({gib(nbytes)}) and runs on the CPU through ONNX Runtime: "
        "an ONNX session is not a torch module, so it is not placed on the device.",
        details={"runtime": "onnxruntime", "provider": "CPUExecutionProvider"},
    )  # fmt: skip


def forget(placement: Placement, model: OnnxModel) -> None:
    placement.manager.forget(model)
