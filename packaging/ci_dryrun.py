"""Dry-run the GitHub Actions workflows' shell steps on this machine, as far as they can run here.

    python3 packaging/ci_dryrun.py [--offline] [--shellcheck PATH] [--built]

For every workflow in ``.github/workflows`` and every matrix entry of each job:

1. structure: each ``needs`` names a job; a ``uses: ./.github/workflows/X.yml`` names a file that
   declares ``workflow_call``; each ``${{ matrix.K }}`` is a key of the job's matrix entries;
2. each ``run:`` step, with its ``${{ ... }}`` expressions filled in (matrix values, a
   ``github.repository`` of ``OWNER/loadout``, empty secrets), is parsed by ``bash -n`` when it
   runs in bash (PowerShell steps are listed, not parsed: no pwsh here) and, with
   ``--shellcheck``, checked by ShellCheck;
3. steps that make sense here are *run*: the torch wheel check (against the real index: PyPI
   answers from here, download.pytorch.org does not, which is reported as unreachable rather than
   failed; ``--offline`` skips it), the macOS certificate import with no secrets (it must skip
   cleanly), the release job's asset step on small stand-in artifacts, and, with ``--built``
   (a Linux bundle in ``dist/Loadout``), the Linux steps that check the built bundle.

Prints one line per step (PASS / RAN / SKIP with the reason / FAIL) and exits 1 on any FAIL.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
WHEELS = "The pinned torch wheel exists on the index"
#: steps run here (by name); the rest are parsed only
RUN_HERE = {
    WHEELS,
    "Signing certificate into a temporary keychain (when the secrets are set)",
    "Assets under 2 GiB each, SHA256SUMS, latest.json",
}
#: Linux steps that check an already built bundle (run with --built)
RUN_BUILT = {
    "Check the desktop entry",
    "The bundle needs no newer glibc than this runner's",
    "Smoke-run the frozen app (offscreen, no Python on PATH)",
}


@dataclass
class Step:
    workflow: str
    job: str
    matrix: dict[str, str]
    name: str
    script: str
    shell: str
    os: str


def version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return str(tomllib.load(fh)["project"]["version"])


def fill(text: str, matrix: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        expr = match[1]
        if expr.startswith("matrix."):
            return matrix[expr.removeprefix("matrix.")]
        known = {
            "github.server_url": "https://github.com",
            "github.repository": "OWNER/loadout",
            "github.ref_name": f"v{version()}",
            "github.token": "",
            "inputs.tag || github.ref_name": f"v{version()}",
        }
        if expr in known:
            return known[expr]
        if expr.startswith("secrets."):
            return ""
        raise KeyError(f"no stand-in for ${{{{ {expr} }}}}")

    return EXPR.sub(value, text)


def load(path: Path) -> dict[str, object]:
    data = yaml.safe_load(path.read_text())
    if True in data:  # YAML 1.1 reads a bare `on` as true
        data["on"] = data.pop(True)
    return dict(data)


def structure(name: str, data: dict[str, object]) -> list[str]:
    problems: list[str] = []
    jobs = data["jobs"]
    assert isinstance(jobs, dict)
    for job_id, job in jobs.items():
        needs = job.get("needs", [])
        for need in [needs] if isinstance(needs, str) else needs:
            if need not in jobs:
                problems.append(f"{name}: job {job_id} needs {need}, which is not a job")
        uses = str(job.get("uses", ""))
        if uses.startswith("./"):
            target = ROOT / uses.removeprefix("./")
            if not target.is_file():
                problems.append(f"{name}: job {job_id} uses {uses}, which does not exist")
            elif "workflow_call" not in load(target)["on"]:  # type: ignore[operator]
                problems.append(f"{name}: job {job_id} uses {uses}, which has no workflow_call trigger")
        keys = set().union(*(e.keys() for e in matrices(job))) if "steps" in job else set()
        for used in re.findall(r"matrix\.(\w+)", yaml.safe_dump(job)):
            if used not in keys:
                problems.append(f"{name}: job {job_id} reads matrix.{used}, which its matrix lacks")
    return problems


def matrices(job: dict[str, object]) -> list[dict[str, str]]:
    strategy = job.get("strategy") or {}
    assert isinstance(strategy, dict)
    include = (strategy.get("matrix") or {}).get("include")
    return [{k: str(v) for k, v in e.items()} for e in include] if include else [{}]


def steps() -> Iterator[Step]:
    for path in sorted(WORKFLOWS.glob("*.yml")):
        data = load(path)
        for job_id, job in data["jobs"].items():  # type: ignore[attr-defined]
            runner = str(job.get("runs-on", ""))
            os_name = "windows" if "windows" in runner else "macos" if "macos" in runner else "linux"
            for matrix in matrices(job):
                for step in job.get("steps", []):
                    if "run" not in step:
                        continue
                    shell = step.get("shell") or ("pwsh" if os_name == "windows" else "bash")
                    yield Step(
                        path.name, job_id, matrix, str(step.get("name", step["run"][:40])),
                        fill(str(step["run"]), matrix), str(shell), os_name,
                    )  # fmt: skip


def parse(step: Step, shellcheck: str | None) -> tuple[str, str]:
    if step.shell != "bash":
        return "SKIP", f"{step.shell} step: no {step.shell} here to parse it"
    check = subprocess.run(["bash", "-n", "-c", step.script], capture_output=True, text=True)
    if check.returncode != 0:
        return "FAIL", f"bash -n: {check.stderr.strip()}"
    if shellcheck:
        with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as fh:
            fh.write("#!/usr/bin/env bash\nset -eo pipefail\n" + step.script)
        try:
            lint = subprocess.run([shellcheck, "-S", "warning", fh.name], capture_output=True, text=True)
        finally:
            os.unlink(fh.name)
        if lint.returncode != 0:
            return "FAIL", "shellcheck: " + lint.stdout.strip().replace("\n", " | ")[:600]
    return "PASS", "parsed"


def run_here(step: Step, *, offline: bool, built: bool) -> tuple[str, str] | None:
    """(status, note) for a step this machine runs, None for the others."""
    runnable = step.name in RUN_HERE or (built and step.os == "linux" and step.name in RUN_BUILT)
    if not runnable or step.shell != "bash":
        return None
    if step.name == WHEELS and offline:
        return "SKIP", "--offline: the index is not asked"
    with tempfile.TemporaryDirectory(prefix="loadout-ci-") as tmp:
        cwd, env = _workspace(Path(tmp), step)
        result = subprocess.run(["bash", "-eo", "pipefail", "-c", step.script], cwd=cwd, env=env,
                                capture_output=True, text=True, timeout=600)  # fmt: skip
    out = (result.stdout + result.stderr).strip().replace("\n", " | ")
    if step.name == WHEELS and result.returncode == 2:
        return "SKIP", f"index unreachable from this machine ({out[:160]})"
    return ("RAN" if result.returncode == 0 else "FAIL"), out[:300]


def _workspace(tmp: Path, step: Step) -> tuple[Path, dict[str, str]]:
    """A stand-in of the runner's checkout: the repository itself, or for the release job a folder
    with small artifacts named as the packaging workflows name theirs."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp),
        "GITHUB_STEP_SUMMARY": str(tmp / "summary.md"), "GITHUB_REPOSITORY": "OWNER/loadout",
        "RUNNER_TEMP": str(tmp), "TAG": f"v{version()}", "GITHUB_ENV": str(tmp / "github_env"),
    }  # fmt: skip
    if step.name.startswith("Assets under"):
        (tmp / "packaging").symlink_to(ROOT / "packaging")
        v = version()
        for artifact, name in (
            ("loadout-linux-x86_64-cuda", f"Loadout-{v}-linux-x86_64-cuda.tar.gz"),
            ("loadout-windows-x64-cuda", f"Loadout-{v}-windows-x64-setup.exe"),
            ("loadout-windows-x64-cuda", f"Loadout-{v}-windows-x64-setup-1.bin"),
            ("loadout-macos-arm64-dmg", f"Loadout-{v}-macos-arm64.dmg"),
        ):
            (tmp / "artifacts" / artifact).mkdir(parents=True, exist_ok=True)
            (tmp / "artifacts" / artifact / name).write_bytes(os.urandom(4096))
        return tmp, env
    return ROOT, env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--offline", action="store_true", help="do not ask package indexes")
    parser.add_argument("--shellcheck", default=shutil.which("shellcheck"), help="ShellCheck binary")
    parser.add_argument("--built", action="store_true", help="also run the Linux steps on dist/Loadout")
    args = parser.parse_args(argv)
    failed = 0
    done: dict[tuple[str, str], tuple[str, str] | None] = {}  # a matrix repeats the same script
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for problem in structure(path.name, load(path)):
            print(f"FAIL  {problem}")
            failed += 1
    for step in steps():
        where = f"{step.workflow} {step.job}{'/' + step.matrix['flavor'] if 'flavor' in step.matrix else ''}"
        status, note = parse(step, args.shellcheck)
        if status == "PASS":
            key = (step.name, step.script)
            if key not in done:
                done[key] = run_here(step, offline=args.offline, built=args.built)
            status, note = done[key] or (status, note)
        failed += status == "FAIL"
        print(f"{status:<5} {where}: {step.name}: {note}")
    print(f"ci_dryrun: {'FAILED' if failed else 'OK'} ({failed} failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
