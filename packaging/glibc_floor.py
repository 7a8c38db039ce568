"""The newest glibc symbol version any ELF file in a folder asks for: the oldest glibc it runs on.

    python3 packaging/glibc_floor.py dist/Loadout [--max 2.35]

Scans every ELF file (the bootloader, Python, torch's and Qt's libraries ...) for the GLIBC_x.y
version names its dynamic string table carries and prints the newest and the files that need it.
With ``--max`` the exit status is 1 when something needs a newer glibc than that (CI: the Linux
bundle must run where the documented floor holds). Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

GLIBC = re.compile(rb"GLIBC_(\d+)\.(\d+)(?:\.(\d+))?\x00")
ELF = b"\x7fELF"


def needs(path: Path) -> tuple[int, ...] | None:
    """The newest GLIBC_ version named in an ELF file; None for other files and ELF files naming none."""
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != ELF:
                return None
            data = fh.read()
    except OSError:
        return None
    found = [tuple(int(n) for n in m.groups() if n is not None) for m in GLIBC.finditer(data)]
    return max(found) if found else None


def scan(folder: Path) -> dict[Path, tuple[int, ...]]:
    out: dict[Path, tuple[int, ...]] = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            if path.is_symlink() or not path.is_file():
                continue
            version = needs(path)
            if version is not None:
                out[path] = version
    return out


def dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(n) for n in version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path)
    parser.add_argument("--max", help="fail when a file needs a newer glibc than this (e.g. 2.35)")
    args = parser.parse_args(argv)
    found = scan(args.folder)
    if not found:
        print(f"glibc_floor: no ELF file asks for a glibc version under {args.folder}", file=sys.stderr)
        return 2
    newest = max(found.values())
    top = sorted(str(p.relative_to(args.folder)) for p, v in found.items() if v == newest)
    print(f"glibc floor of {args.folder}: {dotted(newest)} ({len(found)} ELF files; newest asked by: "
          f"{', '.join(top[:5])}{' ...' if len(top) > 5 else ''})")  # fmt: skip
    if args.max:
        limit = tuple(int(n) for n in args.max.split("."))
        if newest > limit:
            print(f"glibc_floor: {dotted(newest)} is newer than the documented floor {args.max}: build on a "
                  "machine with that glibc (ubuntu-22.04 for 2.35)", file=sys.stderr)  # fmt: skip
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
