"""The ``loadout`` command: no arguments opens the window; subcommands do headless work."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence

from app.commands.words import cli_message
from app.terminal import for_terminal
from core.errors import LoadoutError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loadout", description=__doc__)
    parser.add_argument("--demo", action="store_true", help="open the window on the demo library")
    parser.add_argument("--screenshot", metavar="FILE", help="with --demo: save a screenshot and exit")
    parser.add_argument(
        "--window-size", metavar="WxH", help="with --screenshot: the window's size (default: the screen's)"
    )
    parser.add_argument(
        "--first-launch",
        action="store_true",
        help="with --screenshot: shoot the window as it first opens (the demo library read, nothing loaded)",
    )
    parser.add_argument(
        "--folder", metavar="DIR", help="with --demo: also list this model folder (the screenshot selects "
        "its longest file name)",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command")
    from app.commands import (
        check_cmd,
        convert_cmd,
        generate_cmd,
        inspect_cmd,
        merge_cmd,
        preprocess_cmd,
        run_cmd,
        upscale_cmd,
    )

    inspect_cmd.register(sub)
    check_cmd.register(sub)
    merge_cmd.register(sub)
    convert_cmd.register(sub)
    run_cmd.register(sub)
    generate_cmd.register(sub)
    upscale_cmd.register(sub)
    preprocess_cmd.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Until the command starts working (imports of torch and the engine, parsing), a stop has nothing
    # to clean up: say one line and leave at once (an interrupted import can leave modules half-made,
    # so unwinding through them is not safe). From then on Ctrl-C and SIGTERM stop the work cleanly.
    previous = {sig: signal.getsignal(sig) for sig in _STOPS}
    starting = _catch_stops(_quit_now)
    try:
        return _main(argv, started=lambda: _catch_stops(_raise_keyboard_interrupt) if starting else None)
    except KeyboardInterrupt:  # a command without its own handler
        print("\nloadout: stopped.", file=sys.stderr)
        return 130
    finally:
        if starting:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


_STOPS = (signal.SIGINT, *((signal.SIGTERM,) if hasattr(signal, "SIGTERM") else ()))


def _catch_stops(handler: Callable[[int, object], None]) -> bool:
    """Route SIGINT and SIGTERM to ``handler`` (False where signals cannot be set: not the main thread)."""
    try:
        for sig in _STOPS:
            signal.signal(sig, handler)
    except ValueError:
        return False
    return True


def _quit_now(signum: int, frame: object) -> None:
    os.write(2, b"\nloadout: stopped.\n")
    os._exit(130)


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _main(argv: Sequence[str] | None, started: Callable[[], object]) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except LoadoutError as exc:  # an argument's value refused by its check (app.commands.args)
        print(f"loadout: {for_terminal(cli_message(exc))}", file=sys.stderr)
        return 2
    started()
    if args.command is None:
        from app.gui.launch import run_gui

        size = None
        if args.window_size:
            try:
                w, h = (int(v) for v in args.window_size.lower().split("x"))
            except ValueError:
                print(f"loadout: --window-size {args.window_size!r} is not WIDTHxHEIGHT (e.g. 1366x768)",
                      file=sys.stderr)  # fmt: skip
                return 2
            size = (w, h)
        return run_gui(
            demo=args.demo, screenshot=args.screenshot, window_size=size, extra_folder=args.folder,
            first_launch=args.first_launch,
        )  # fmt: skip
    try:
        code: int = args.handler(args)
    except BrokenPipeError:
        # The reader went away (`loadout inspect ... | head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("\nloadout: stopped; nothing was left half-written.", file=sys.stderr)
        return 130
    except LoadoutError as exc:
        print(f"loadout: {for_terminal(cli_message(exc))}", file=sys.stderr)
        return 2
    except Exception as exc:
        if os.environ.get("LOADOUT_DEBUG"):
            raise
        print(
            f"loadout: internal error ({type(exc).__name__}: {exc}). This is a bug in Loadout; "
            "run again with LOADOUT_DEBUG=1 for the details and please report them.",
            file=sys.stderr,
        )
        return 3
    return code


if __name__ == "__main__":
    sys.exit(main())
