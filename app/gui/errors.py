"""The one place where engine errors become plain words for the window.

The worker turns every exception into a :class:`~app.backend.messages.TaskError` (the engine's
stable ``code`` and its what/why/fix message); :func:`describe` gives the title and text an
artist reads. Nothing else in the GUI words an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.backend.messages import TaskError

Level = Literal["error", "warning", "info"]

_TASKS = {
    "scan": "Reading the model folders",
    "load": "Loading the model",
    "unload": "Unloading",
    "lora": "Changing the LoRA stack",
    "strength": "Changing a LoRA strength",
    "run": "The test run",
    "demo": "Preparing the demo library",
    "generate": "Generating",
    "memory": "The memory manager",
}

#: code -> (title, plain-words lead, level); the engine's own message follows the lead.
_CODES: dict[str, tuple[str, str, Level]] = {
    "interrupted": ("Stopped", "Stopped as you asked; nothing was left half-done.", "info"),
    "no_model": ("No model loaded", "Load a checkpoint first.", "warning"),
    "lora_family_mismatch": (
        "LoRA for another model",
        "This LoRA was made for a different model.",
        "warning",
    ),
    "wrong_kind": ("Not that kind of file", "This file is not what this action needs.", "warning"),
    "not_loadable": ("Cannot load this file alone", "This kind of file is not loaded on its own.", "warning"),
    "truncated": ("Damaged file", "The file is incomplete (an interrupted download?).", "error"),
    "invalid_file": ("Damaged or unknown file", "The file could not be read as a model.", "error"),
    "unsafe_file": (
        "Refused for your safety",
        "This file would run code if loaded, so it is refused.",
        "error",
    ),
    "file_access": ("Cannot open the file", "The file is missing or cannot be read.", "error"),
    "not_a_model": ("Not a model file", "This file is not a model Loadout knows.", "error"),
    "not_found": ("File not found", "The file was moved or deleted; rescan the library (F5).", "error"),
    "os_error": ("Disk problem", "The operating system refused a file operation.", "error"),
    "out_of_memory": (
        "Out of memory",
        "There is not enough memory for this; unload a model or use a smaller one.",
        "error",
    ),
    "unsupported_format": (
        "Format not supported yet",
        "Loadout can show this file but not load it.",
        "warning",
    ),
    "shape_mismatch": ("File does not match its model", "Some weights have the wrong shape.", "error"),
    "missing_weights": ("File is incomplete", "Some weights the model needs are missing.", "error"),
    "nonfinite_adapter": ("Broken LoRA", "The LoRA holds invalid numbers and would ruin the model.", "error"),
    "invalid_header": ("Damaged file", "The file's header is broken (an interrupted download?).", "error"),
    "invalid_offsets": (
        "Damaged file",
        "The file's layout is inconsistent (an interrupted download?).",
        "error",
    ),
    "empty_file": ("Empty file", "The file is empty.", "error"),
    "unsafe_pickle": (
        "Refused for your safety",
        "This file would run code if loaded, so it is refused.",
        "error",
    ),
    "unreadable": ("Cannot read the file", "The file cannot be read (permissions?).", "error"),
    "layout_mismatch": ("File does not match its model", "The file's keys do not fit the model.", "error"),
    "unknown_component": ("Unknown model part", "Part of this file is not a model Loadout knows.", "warning"),
    "unsupported_family": (
        "Model not supported yet",
        "Loadout can show this model but not load it.",
        "warning",
    ),
    "disk_full": ("Disk full", "There is no space left on the disk.", "error"),
    "sparse_demo": ("Demo file without weights", "This demo file has real shapes but no weights.", "info"),
    "bad_argument": ("Invalid settings", "Some settings are out of range.", "warning"),
    "no_parameters": ("No generation parameters", "This picture does not say how it was made.", "info"),
    "bad_parameters": ("Unreadable parameters", "This picture's parameters could not be read.", "warning"),
    "not_an_image": ("Not a picture", "This file is not a picture Loadout can read.", "warning"),
    "bad_config": (
        "Bad model folder config",
        "A model folder configuration file could not be used.",
        "warning",
    ),
}


@dataclass(frozen=True)
class Friendly:
    title: str
    text: str
    level: Level


def describe(error: TaskError) -> Friendly:
    """Title and text for an error, in plain words, with the engine's specific message."""
    if error.internal:
        return Friendly(
            "Something went wrong inside Loadout",
            f"{_TASKS.get(error.task, 'The task')} failed because of a bug in Loadout ({error.message}). "
            "Your files were not changed. Please report this message.",
            "error",
        )
    if error.task == "memory" and error.code == "out_of_memory":  # Load to GPU: generating still works
        return Friendly(
            "Does not fit on the GPU",
            f"{_capitalized(error.message)} Generating on this card still works: what does not fit "
            "streams to the GPU layer by layer at each step (slower).",
            "info",
        )
    title, lead, level = _CODES.get(error.code, (f"{_TASKS.get(error.task, 'The task')} failed", "", "error"))
    message = _capitalized(error.message)
    text = f"{lead} {message}".strip() if lead and error.code != "interrupted" else (lead or message)
    return Friendly(title, text, level)


def _capitalized(message: str) -> str:
    """The engine's message as a sentence of its own ("not enough…" -> "Not enough…"); a message
    that starts with a file name (it has a dot or an underscore in its first word) keeps its case."""
    first = message.split(" ", 1)[0]
    if first.isalpha() and first.islower():
        return message[:1].upper() + message[1:]
    return message


def describe_exception(task: str, exc: BaseException) -> Friendly:
    """For the rare error raised in the GUI thread itself (a settings value, a folder)."""
    code = getattr(exc, "code", None)
    message = getattr(exc, "message", None) or str(exc)
    return describe(TaskError(task, code or "internal", message, internal=code is None))  # type: ignore[arg-type]
