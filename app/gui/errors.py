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
    "nonfinite_values": ("Broken model file", "A model part made invalid numbers; nothing saved.", "error"),
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
    "unsupported_upscale_model": (
        "Not an upscale model Loadout can use",
        "spandrel recognises no single-picture upscaler in this file.",
        "error",
    ),
    "invalid_upscale_model": ("Damaged upscale model", "Its weights do not fit the network.", "error"),
    "write_failed": ("Cannot write the file", "The file could not be written there.", "error"),
    "bad_queue_file": ("Queue file unreadable", "The queue file is damaged.", "error"),
    "cluster_lost": ("Cluster went away", "The cluster stopped; its jobs stay queued.", "warning"),
    "cluster_unavailable": ("No cluster support in this Loadout", "The jobs stay queued.", "warning"),
    "cluster_unreachable": ("Cannot reach the cluster", "No Ray cluster answered; check Settings.", "error"),
    "cluster_workers": ("No cluster workers", "The cluster has no worker that can run these jobs.", "error"),
    "missing_file": ("Model file missing", "A worker does not have a file this job needs.", "warning"),
    "no_job": ("No such job", "That job is no longer in the queue.", "warning"),
    "queue_file": ("Cannot use the queue file", "The queue file could not be opened or written.", "error"),
    "unsupported_variant": ("Variant not supported", "Loadout cannot fill its extra inputs.", "warning"),
    "wrong_controlnet": ("ControlNet does not fit", "It is for another model family.", "warning"),
    "wrong_ip_adapter": ("IP-Adapter does not fit", "It is for another family or image encoder.", "warning"),
    "missing_image_encoder": ("Image encoder missing", "An IP-Adapter needs a CLIP vision file.", "warning"),
    "no_face": ("No face found", "FaceID needs a picture with a face it can see.", "warning"),
    "wrong_refiner": ("Refiner does not fit", "The SDXL refiner follows an SDXL base model.", "warning"),
    "bad_device": ("No such device", "That device is not on this machine; pick one from Settings.", "error"),
    "bad_output": ("Cannot save there", "That place cannot hold the output; choose another folder.", "error"),
    "output_exists": ("Already there", "Loadout does not overwrite it; choose another folder.", "error"),
    "file_changed": (
        "File changed while in use",
        "Another program changed the file while Loadout was reading it.",
        "error",
    ),
    # the message is the whole story: which file, that it was unloaded, what to do
    "model_file_changed": ("Model file changed on disk", "", "warning"),
    "lora_partial_match": (
        "LoRA does not fit whole",
        "Part of this LoRA fits nothing in the model.",
        "warning",
    ),
    "sparse_demo": ("Demo file without weights", "This demo file has real shapes but no weights.", "info"),
    "bad_argument": ("Invalid settings", "Some settings are out of range.", "warning"),
    "bad_config": (
        "Bad model folder config",
        "A model folder configuration file could not be used.",
        "warning",
    ),
    "config_unreadable": (
        "Bad model folder config",
        "A model folder configuration file cannot be read.",
        "warning",
    ),
    "error": ("Something went wrong", "", "error"),
    "bad_dtype": ("Invalid precision", "That precision cannot be used here.", "warning"),
    "bad_input": ("Invalid input", "The model was given inputs of the wrong shape.", "error"),
    "bad_parameters": (
        "Unreadable parameters",
        "The picture's generation parameters cannot be read.",
        "warning",
    ),
    "bad_prompt_weight": (
        "Prompt weight not understood",
        "A (word:weight) in the prompt is malformed.",
        "warning",
    ),
    "header_too_large": (
        "Damaged file",
        "The file's header is implausibly large (a damaged file?).",
        "error",
    ),
    "invalid_adapter": ("Broken LoRA", "The LoRA's weights do not fit together.", "error"),
    "invalid_pickle": ("Damaged file", "The checkpoint's pickle data is broken.", "error"),
    "invalid_setting": ("Invalid setting", "A memory setting is out of range.", "warning"),
    "invalid_shape": ("Damaged file", "A tensor's shape in the file is impossible.", "error"),
    "is_directory": ("Not a file", "That is a folder, not a model file.", "warning"),
    "missing_conditioning": (
        "Text encoder missing",
        "The model needs a text encoder that is not loaded.",
        "warning",
    ),
    "missing_dependency": (
        "Part of Loadout is missing",
        "A package Loadout needs is not installed.",
        "error",
    ),
    "missing_vae": ("VAE missing", "This model has no VAE; load one beside it.", "warning"),
    "no_device": ("No GPU", "There is no GPU to place models on.", "warning"),
    "no_parameters": (
        "No parameters in the picture",
        "The picture carries no generation parameters.",
        "info",
    ),
    "not_a_file": ("Not a file", "That path is not a regular file.", "warning"),
    "not_an_image": ("Not a picture", "That file is not a picture Loadout can read.", "warning"),
    "not_loaded": ("Model not loaded", "That model is not loaded.", "warning"),
    "output_is_input": (
        "Would overwrite the source",
        "The output would replace the file being read.",
        "warning",
    ),
    "prompt_too_long": ("Prompt too long", "The prompt is longer than this model can read.", "warning"),
    "quantized_source": ("Quantized model", "A quantized model cannot be saved this way.", "warning"),
    "read_failed": ("Cannot read the file", "Reading the file failed.", "error"),
    "tokenizer_missing": (
        "Tokenizer missing",
        "The text tokenizer this model needs was not found.",
        "warning",
    ),
    "unknown_dtype": (
        "Unknown precision",
        "The file stores numbers in a type Loadout does not know.",
        "error",
    ),
    "unsupported_adapter": ("LoRA type not supported", "This kind of LoRA cannot be applied yet.", "warning"),
    "unsupported_dtype": ("Precision not supported", "That precision is not supported here.", "warning"),
    "unsupported_size": ("Size not supported", "This model cannot make pictures of that size.", "warning"),
    "wrong_model": ("Not the right model", "This file is not what this action needs.", "warning"),
    "wrong_vae": ("Wrong VAE", "This VAE does not belong to the model.", "warning"),
}


#: code -> where in the window to act on it (the engine speaks in its own terms, not in ours)
_IN_THE_WINDOW: dict[str, str] = {
    "no_model": "Double-click a model in the browser, or select it and press Ctrl+L.",
    "no_device": "Settings > Memory can simulate a card.",
    "out_of_memory": (
        "Settings > Memory sets what is kept free for other apps; a component row in Loaded models "
        "places one part at a time."
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
    if error.code in _IN_THE_WINDOW:
        text = f"{text} {_IN_THE_WINDOW[error.code]}"
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
