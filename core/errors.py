"""One exception hierarchy for the engine.

Every error says *what* went wrong, *why*, and *what to do*; the GUI and the CLI map them to
friendly text in one place. ``code`` is a stable machine-readable identifier (used in JSON output).
"""

from __future__ import annotations


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
