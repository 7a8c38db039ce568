"""Whether this install can run jobs on a Ray cluster, said in plain words when it cannot.

Ray is an optional extra (``pip install 'loadout[cluster]'``). The ready-to-run downloads
(PyInstaller bundles) do not carry it and have no pip to add it with, so there the message says
what to do instead: run the jobs on this computer, or install Loadout as a Python package with the
extra. Both the command line (``generate --ray``) and the window's Queue go through
:func:`ray_pool_module`, so neither ever shows Python's ``ModuleNotFoundError``.
"""

from __future__ import annotations

import sys
from types import ModuleType

from core.errors import ErrorCode, LoadoutError

INSTALL = "python -m pip install 'loadout[cluster]'"


class ClusterUnavailable(LoadoutError):
    """Ray (the cluster executor) is not installed in this Loadout."""

    code = ErrorCode.CLUSTER_UNAVAILABLE

    def __init__(self, *, frozen: bool) -> None:
        if frozen:
            super().__init__(
                "This download of Loadout cannot run jobs on a Ray cluster",
                why="the ready-to-run program carries what runs on this computer, not Ray",
                fix="Run the jobs on this computer (without a cluster address); for a cluster, "
                f"install Loadout as a Python package with its cluster extra ({INSTALL}) "
                "on this computer and on every cluster node (docs/install.md, 'Running jobs on a cluster')",
            )
        else:
            super().__init__(
                "Ray is not installed",
                why="running jobs on a Ray cluster is an optional part of Loadout",
                fix=f"Install it into the Python environment Loadout runs from: {INSTALL}; or run the jobs "
                "on this computer (without a cluster address)",
            )


def frozen() -> bool:
    """A PyInstaller bundle (the downloads), not a Python install."""
    return bool(getattr(sys, "frozen", False))


def ray_pool_module() -> ModuleType:
    """``core.queue.ray_pool``, or :class:`ClusterUnavailable` when Ray cannot be imported."""
    try:
        from core.queue import ray_pool
    except ImportError as exc:
        if exc.name is not None and exc.name != "ray" and not exc.name.startswith("ray."):
            raise  # something else is missing: not this message's business
        raise ClusterUnavailable(frozen=frozen()) from None
    return ray_pool
