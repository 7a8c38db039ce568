"""One exception hierarchy for the engine.

Every error says *what* went wrong, *why*, and *what to do*; the GUI and the CLI map them to
friendly text in one place. ``code`` is a stable machine-readable identifier (used in JSON output).
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Every stable ``code`` an engine error carries (JSON output, the window's titles). Raising
    sites write the string; ``tests/core/test_error_codes.py`` checks each is a member here, and
    ``app/gui/errors.py`` maps every member to a title."""

    BAD_ARGUMENT = "bad_argument"
    BAD_DEVICE = "bad_device"
    BAD_CONFIG = "bad_config"
    BAD_DTYPE = "bad_dtype"
    BAD_INPUT = "bad_input"
    BAD_OUTPUT = "bad_output"
    BAD_PARAMETERS = "bad_parameters"
    BAD_PROMPT_WEIGHT = "bad_prompt_weight"
    BAD_QUEUE_FILE = "bad_queue_file"
    CLUSTER_LOST = "cluster_lost"
    CLUSTER_UNAVAILABLE = "cluster_unavailable"
    CLUSTER_UNREACHABLE = "cluster_unreachable"
    CLUSTER_WORKERS = "cluster_workers"
    CONFIG_UNREADABLE = "config_unreadable"
    DISK_FULL = "disk_full"
    EMPTY_FILE = "empty_file"
    ERROR = "error"
    FILE_ACCESS = "file_access"
    FILE_CHANGED = "file_changed"
    HEADER_TOO_LARGE = "header_too_large"
    INTERRUPTED = "interrupted"
    INVALID_ADAPTER = "invalid_adapter"
    INVALID_FILE = "invalid_file"
    INVALID_HEADER = "invalid_header"
    INVALID_OFFSETS = "invalid_offsets"
    INVALID_PICKLE = "invalid_pickle"
    INVALID_SETTING = "invalid_setting"
    INVALID_SHAPE = "invalid_shape"
    IS_DIRECTORY = "is_directory"
    LAYOUT_MISMATCH = "layout_mismatch"
    LORA_FAMILY_MISMATCH = "lora_family_mismatch"
    LORA_PARTIAL_MATCH = "lora_partial_match"
    MISSING_CONDITIONING = "missing_conditioning"
    MISSING_DEPENDENCY = "missing_dependency"
    MISSING_FILE = "missing_file"
    MISSING_VAE = "missing_vae"
    MISSING_WEIGHTS = "missing_weights"
    MODEL_FILE_CHANGED = "model_file_changed"
    NO_DEVICE = "no_device"
    NO_FACE = "no_face"
    NO_JOB = "no_job"
    NO_MODEL = "no_model"
    NO_PARAMETERS = "no_parameters"
    NONFINITE_ADAPTER = "nonfinite_adapter"
    NOT_A_FILE = "not_a_file"
    NOT_A_MODEL = "not_a_model"
    NOT_AN_IMAGE = "not_an_image"
    NOT_FOUND = "not_found"
    NOT_LOADABLE = "not_loadable"
    NOT_LOADED = "not_loaded"
    NONFINITE_VALUES = "nonfinite_values"
    OUT_OF_MEMORY = "out_of_memory"
    OUTPUT_EXISTS = "output_exists"
    OUTPUT_IS_INPUT = "output_is_input"
    PROMPT_TOO_LONG = "prompt_too_long"
    QUANTIZED_SOURCE = "quantized_source"
    QUEUE_FILE = "queue_file"
    READ_FAILED = "read_failed"
    SHAPE_MISMATCH = "shape_mismatch"
    TOKENIZER_MISSING = "tokenizer_missing"
    TRUNCATED = "truncated"
    UNKNOWN_COMPONENT = "unknown_component"
    UNKNOWN_DTYPE = "unknown_dtype"
    UNREADABLE = "unreadable"
    UNSAFE_FILE = "unsafe_file"
    UNSAFE_PICKLE = "unsafe_pickle"
    UNSUPPORTED_ADAPTER = "unsupported_adapter"
    UNSUPPORTED_DTYPE = "unsupported_dtype"
    UNSUPPORTED_FAMILY = "unsupported_family"
    UNSUPPORTED_FORMAT = "unsupported_format"
    UNSUPPORTED_SIZE = "unsupported_size"
    UNSUPPORTED_UPSCALE_MODEL = "unsupported_upscale_model"
    INVALID_UPSCALE_MODEL = "invalid_upscale_model"
    UNSUPPORTED_VARIANT = "unsupported_variant"
    WRITE_FAILED = "write_failed"
    WRONG_CONTROLNET = "wrong_controlnet"
    WRONG_IP_ADAPTER = "wrong_ip_adapter"
    MISSING_IMAGE_ENCODER = "missing_image_encoder"
    WRONG_KIND = "wrong_kind"
    WRONG_MODEL = "wrong_model"
    WRONG_REFINER = "wrong_refiner"
    WRONG_VAE = "wrong_vae"


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return text[:1].upper() + text[1:] + "."


class LoadoutWarning(UserWarning):
    """Warnings raised by the engine itself (tests turn them into errors)."""


class LoadoutError(Exception):
    """Base of every error the engine raises on purpose."""

    code: str = "error"

    def __init__(self, what: str, *, why: str = "", fix: str = "", code: str | None = None) -> None:
        self.what = what
        self.why = why
        self.fix = fix
        if code is not None:
            self.code = code
        super().__init__(self.message)

    @property
    def message(self) -> str:
        # "what" often starts with a file name, whose case is kept.
        parts = [self.what.strip().rstrip(".") + "."]
        parts += [_sentence(p) for p in (self.why, self.fix) if p]
        return " ".join(parts)

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


class FileAccessError(LoadoutError):
    """The path does not exist, is a directory, or cannot be read."""

    code = "file_access"


class FileFormatError(LoadoutError):
    """The file is not a valid model file (bad header, truncated, wrong format)."""

    code = "invalid_file"


class UnsafeFileError(LoadoutError):
    """The file would run code if loaded, so it is refused."""

    code = "unsafe_file"


class ModelMismatchError(LoadoutError):
    """The file is valid but is not what the operation needs (a LoRA where a checkpoint goes)."""

    code = "wrong_model"


class InterruptedByUser(LoadoutError):
    """The user pressed stop; the operation ended early and left everything consistent.

    ``written`` names the files that were complete before the stop (pictures of a sweep's earlier
    cells): a stopped batch itself writes nothing, so this is empty unless earlier work was saved."""

    code = "interrupted"
    written: tuple[str, ...] = ()


class FileChangedError(LoadoutError):
    """An input file was truncated or rewritten by another program while Loadout was using it."""

    code = "file_changed"
