"""The ``loadout`` command: no arguments opens the window; subcommands do headless work."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loadout", description=__doc__)
    parser.add_argument("--demo", action="store_true", help="open the window on the demo library")
    parser.add_argument("--screenshot", metavar="FILE", help="with --demo: save a screenshot and exit")
    sub = parser.add_subparsers(dest="command")
    from app.commands import inspect_cmd

    inspect_cmd.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        from app.gui.launch import run_gui

        return run_gui(demo=args.demo, screenshot=args.screenshot)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
