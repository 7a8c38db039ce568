"""Entry point of the frozen app (PyInstaller): the same ``loadout`` command as the console script."""

import multiprocessing
import sys

from app.cli import main

if __name__ == "__main__":
    multiprocessing.freeze_support()  # a frozen child process runs its task, not the app
    sys.exit(main())
