"""Output destinations, checked before any work: a file Loadout will write, or a folder it fills.

Every command that writes checks its destination first (``generate``, ``convert``, ``merge``, the
window's output folder), so a bad one is refused in a second, not after minutes of work:

- an existing **folder** given as a file output is refused (``convert -o DIR``); ``generate -o DIR``
  is the one exception, by design: an existing folder there means "write the pictures into it"
  (numbered files, as the window does), never ``DIR.png`` beside it;
- an existing path that is not a regular file (a device, a pipe, a socket) is refused;
- system folders (``/proc``, ``/sys``, ``/dev``) are refused: they are not disks and their "free
  space" is meaningless;
- the folder that will hold the file must be writable (or creatable under a writable folder) and
  not a file itself;
- every name in the path must fit the file system (255 bytes on most), checked for the names the
  command will really write (``OUT.png`` for ``-o OUT``, ``OUT-2.png`` for a batch), so a long name
  is refused before the work, not when the finished file is saved.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from core.errors import FileAccessError

#: pseudo file systems that can never hold a model or a picture
SYSTEM_FOLDERS = (Path("/proc"), Path("/sys"), Path("/dev"))


def _refuse(path: Path, why: str, fix: str = "Choose another output path") -> FileAccessError:
    return FileAccessError(f"cannot write {path}", why=why, fix=fix, code="bad_output")


def _under_system_folder(path: Path) -> bool:
    if os.name != "posix":
        return False
    real = Path(os.path.realpath(path))
    return any(real == top or top in real.parents for top in SYSTEM_FOLDERS)


def _check_parent(path: Path, folder: Path) -> None:
    """``folder`` (which will hold ``path``) exists as a writable folder, or can be made in one."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise _refuse(path, f"{probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise _refuse(path, f"the folder {probe} cannot be written to", "Choose a folder you can write to")


def _name_max(folder: Path) -> int:
    probe = folder
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        return int(os.pathconf(probe, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


def _check_names(path: Path) -> None:
    """Every part of ``path`` fits the file system's name length."""
    limit = _name_max(path.parent)
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > limit:
            shown = part if len(part) <= 40 else f"{part[:20]}...{part[-12:]}"
            raise _refuse(
                Path(shown),
                f"the name is {size} bytes long and the file system allows {limit}",
                "Give a shorter name",
            )


def check_output_file(path: str | os.PathLike[str]) -> Path:
    """Raise (code ``bad_output``) unless a file can be written at ``path``; returns it as a Path."""
    out = Path(path)
    if str(path).endswith(("/", os.sep)) or out.name in ("", ".", ".."):
        raise _refuse(out, "it names a folder, not a file", "Give a file name, like out.safetensors")
    _check_names(out)
    if _under_system_folder(out):
        raise _refuse(out, "it is in a system folder, which is not a disk")
    try:
        st = os.stat(out)
    except (FileNotFoundError, NotADirectoryError):  # the folder part is checked below
        st = None
    except OSError as exc:
        raise _refuse(out, exc.strerror or str(exc)) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise _refuse(out, "it is an existing folder", "Give a file name inside it, like DIR/out.safetensors")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise _refuse(out, "it is not a regular file (a device, a pipe or a socket)")
    _check_parent(out, out.parent)
    return out


def check_output_folder(path: str | os.PathLike[str]) -> Path:
    """Raise (code ``bad_output``) unless pictures can be written into the folder ``path``."""
    folder = Path(path)
    _check_names(folder)
    if _under_system_folder(folder):
        raise _refuse(folder, "it is a system folder, which is not a disk")
    if folder.exists() and not folder.is_dir():
        raise _refuse(folder, "it is a file, not a folder")
    _check_parent(folder / "x", folder)
    return folder
