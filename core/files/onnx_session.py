"""An ONNX file opened for running: ONNX Runtime's session on the CPU (its CPU execution provider;
the CUDA provider is not used: its memory would sit outside the memory manager's plan), shared by
the ONNX models Loadout runs (DWPose's, InsightFace's); a file the runtime cannot build is refused
in words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import FileFormatError, LoadoutError


def _runtime(purpose: str) -> Any:
    try:
        import onnxruntime
    except ImportError:  # pragma: no cover - a dependency of the package
        raise LoadoutError(
            f"{purpose} needs ONNX Runtime, which is not installed",
            fix="Install it with: pip install onnxruntime",
            code="missing_dependency",
        ) from None
    return onnxruntime


def open_session(path: Path, purpose: str, fix: str, code: str = "invalid_file") -> Any:
    """``path``'s ONNX Runtime session on the CPU, its warnings quiet; refused in words (``fix``,
    ``code``) when the runtime cannot build it; ``purpose`` names what needs the runtime."""
    runtime = _runtime(purpose)
    options = runtime.SessionOptions()
    options.log_severity_level = 3  # its warnings (unused initializers ...) are not the artist's
    try:
        return runtime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own (pybind) exception types
        text = str(exc).strip()
        raise FileFormatError(
            f"{Path(path).name} could not be opened by ONNX Runtime",
            why=text.splitlines()[0][:200] if text else type(exc).__name__,
            fix=fix,
            code=code,
        ) from None
