"""A command in a child process inside a RAM limit, its memory sampled: the picture benches'
runner (``bench.zimage --picture``, ``bench.qwen_image``).

The limit is the kernel's ``RLIMIT_DATA``: every private writable mapping, heap and anonymous
memory counted by size, so the child cannot hold more private memory than that, whatever it
touches. Its ``/proc/PID/status`` is sampled every 50 ms for the peaks of VmRSS, RssAnon, RssFile
(the page cache's pages of mapped files: shared and reclaimable) and VmData; a ``trace`` file the
child appends lines to (``elapsed stage``) is read back, so a run that fails says after which stage.

``anon_cap`` instead of (or beside) the kernel's limit: the child is killed once its private
resident memory (RssAnon) passes it, a limit on the memory it really holds rather than on the size
of its writable mappings (a copy-on-write mapping of a 20 GB file counts 20 GB to RLIMIT_DATA and
nothing to RssAnon until written).
"""

from __future__ import annotations

import resource
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmData")


def status(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in FIELDS:
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


@dataclass
class Limited:
    returncode: int
    stdout: str
    stderr: str
    wall_seconds: float
    peaks: dict[str, int] = field(default_factory=dict)
    #: killed for passing ``anon_cap``
    killed: bool = False
    #: the peaks (and time) when each line of the trace file appeared: memory per stage
    stages: list[dict[str, object]] = field(default_factory=list)

    def memory(self) -> dict[str, int | None]:
        return {
            "peak_rss_bytes": self.peaks.get("VmRSS"),
            "peak_rss_anon_bytes": self.peaks.get("RssAnon"),
            "peak_rss_file_bytes": self.peaks.get("RssFile"),
            "peak_vm_data_bytes": self.peaks.get("VmData"),
        }


def run_limited(
    cmd: list[str],
    data_limit: int | None,
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    trace: Path | None = None,
    anon_cap: int | None = None,
) -> Limited:
    def cap() -> None:
        if data_limit is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (data_limit, data_limit))

    peaks: dict[str, int] = {}
    stages: list[dict[str, object]] = []
    seen = 0
    killed = False
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=cap
    )
    done = threading.Event()
    t0 = time.perf_counter()

    def sample() -> None:
        nonlocal seen, killed
        while not done.is_set():
            now = status(proc.pid)
            for k, v in now.items():
                peaks[k] = max(peaks.get(k, 0), v)
            if anon_cap is not None and now.get("RssAnon", 0) > anon_cap and not killed:
                proc.kill()
                killed = True
            if trace is not None and trace.exists():
                lines = trace.read_text().splitlines()
                for line in lines[seen:]:
                    stages.append({"stage": line, "at_seconds": round(time.perf_counter() - t0, 1), **peaks})
                seen = len(lines)
            done.wait(0.05)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    done.set()
    watcher.join()
    return Limited(proc.returncode, stdout, stderr, round(wall, 1), peaks, killed=killed, stages=stages)


def placement(report: dict) -> list[dict]:
    """A ``loadout generate --json`` report's memory events (every placement decision)."""
    keep = ("kind", "model", "bytes", "device_bytes_after", "reason", "details")
    return [{k: e.get(k) for k in keep} for e in report.get("events", [])]
