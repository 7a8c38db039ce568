"""Release engineering: the torch wheels the workflows install exist, every release asset fits
GitHub's limit, the workflows' shell steps dry-run here, the bundle's glibc floor is measured."""

from __future__ import annotations

import http.server
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str) -> ModuleType:
    """A packaging/ script as a module (the folder is not a package: ``packaging`` is PyPI's)."""
    spec = importlib.util.spec_from_file_location(
        f"loadout_packaging_{name}", ROOT / "packaging" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


glibc_floor, release_assets, torch_wheels = (
    _script(n) for n in ("glibc_floor", "release_assets", "torch_wheels")
)
WORKFLOWS = ROOT / ".github" / "workflows"
PACKAGE_WORKFLOWS = ("package-linux.yml", "package-windows.yml", "package-macos.yml")


def _workflow(name: str) -> dict:  # type: ignore[type-arg]
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))
    return dict(data)


# --- the torch indexes -------------------------------------------------------------------------------
def test_every_torch_index_a_workflow_names_is_published_for_the_pinned_release() -> None:
    """torch 2.12/2.13 publish no cu128 wheels: the old workflows named that index (fails there)."""
    pinned = torch_wheels.pinned_torch()
    minor = ".".join(pinned.split(".")[:2])
    published = torch_wheels.PUBLISHED_CUDA[minor]
    named = set()
    for name in PACKAGE_WORKFLOWS:
        named |= set(re.findall(r"download\.pytorch\.org/whl/(\w+)", (WORKFLOWS / name).read_text()))
    assert named, "no workflow installs torch from PyTorch's index"
    for flavour in named:
        assert flavour == "cpu" or flavour in published, f"torch {minor} publishes no {flavour} wheels"
    assert "cu130" in named, "RTX 50-series cards need a CUDA 12.8+ build: for torch 2.13 that is cu130"


@pytest.mark.parametrize("name", PACKAGE_WORKFLOWS)
def test_each_packaging_job_checks_the_pinned_wheel_before_building(name: str) -> None:
    for job in _workflow(name)["jobs"].values():
        runs = [str(s["run"]) for s in job["steps"] if "run" in s]
        assert "packaging/torch_wheels.py" in runs[0], f"{name}: the wheel check is not the first step"
        assert "packaging/build.py" in "\n".join(runs[1:])


class _Index(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # keep the test output clean
        pass


@pytest.fixture
def local_index(tmp_path: Path) -> Iterator[str]:
    """A PEP 503 index on 127.0.0.1 (a real HTTP server, stopped after the test)."""
    page = tmp_path / "simple" / "torch"
    page.mkdir(parents=True)
    wheels = [
        "torch-2.13.0%2Bcu130-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.13.0%2Bcu130-cp311-cp311-win_amd64.whl",
        "torch-2.12.0%2Bcu130-cp312-cp312-win_amd64.whl",
        "torch-2.10.0-cp311-cp311-macosx_14_0_arm64.whl",
    ]
    links = "".join(f'<a href="../../files/{w}#sha256=00">{w.replace("%2B", "+")}</a><br/>' for w in wheels)
    (page / "index.html").write_text(f"<!DOCTYPE html><html><body>{links}</body></html>")

    def handler(*args: object) -> _Index:
        return _Index(*args, directory=str(tmp_path))  # type: ignore[arg-type]

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


def test_wheel_check_finds_the_pinned_wheel_on_a_real_index(local_index: str) -> None:
    code, message = torch_wheels.check(local_index, "2.13.0", "3.11", "win_amd64")
    assert code == 0 and "torch-2.13.0+cu130-cp311-cp311-win_amd64.whl" in message
    assert torch_wheels.check(local_index, "2.13.0", "3.11", "linux_x86_64")[0] == 0


def test_wheel_check_says_what_is_missing_and_what_there_is(local_index: str) -> None:
    code, message = torch_wheels.check(local_index, "2.13.0", "3.11", "macosx_arm64")
    assert code == 1 and "no torch 2.13.0 wheel for Python 3.11 on macosx_arm64" in message
    assert "2.10.0" in message  # what the index has for that Python and platform
    code, message = torch_wheels.check(local_index, "2.13.0+cu126", "3.11", "win_amd64")
    assert code == 1


def test_wheel_check_refuses_an_unpublished_cuda_build_without_asking() -> None:
    code, message = torch_wheels.check(
        "https://download.pytorch.org/whl/cu128", "2.13.0", "3.11", "win_amd64"
    )
    assert code == 1 and "publishes no cu128" in message and "cu130" in message


def test_wheel_check_reports_an_unreachable_index() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, message = torch_wheels.check(f"http://127.0.0.1:{port}/simple", "2.13.0", "3.11", "win_amd64")
    assert code == 2 and "cannot read" in message


# --- release assets ----------------------------------------------------------------------------------
def test_release_assets_cut_large_files_under_the_limit_and_join_back(tmp_path: Path) -> None:
    v = release_assets.project_version()
    art = tmp_path / "artifacts"
    (art / "linux").mkdir(parents=True)
    (art / "mac").mkdir()
    big = os.urandom(250_000)
    (art / "linux" / f"Loadout-{v}-linux-x86_64-cuda.tar.gz").write_bytes(big)
    (art / "mac" / f"Loadout-{v}-macos-arm64.dmg").write_bytes(b"dmg")
    out = tmp_path / "release"
    assets = release_assets.prepare(art, out, tag=f"v{v}", repo="o/loadout", limit=100_000)
    names = sorted(a.name for a in assets)
    parts = [n for n in names if ".part" in n]
    assert len(parts) == 3 and all((out / n).stat().st_size <= 100_000 for n in names)
    joined = b"".join((out / f"Loadout-{v}-linux-x86_64-cuda.tar.gz.part{i}").read_bytes() for i in (1, 2, 3))
    assert joined == big
    (out / f"Loadout-{v}-linux-x86_64-cuda.tar.gz").write_bytes(joined)
    if shutil.which("sha256sum"):
        check = subprocess.run(["sha256sum", "-c", "--ignore-missing", "SHA256SUMS"], cwd=out,
                               capture_output=True, text=True)  # fmt: skip
        assert check.returncode == 0 and check.stdout.count(": OK") == 5, check.stdout
    feed = (out / "latest.json").read_text()
    assert f'"version": "{v}"' in feed and f"https://github.com/o/loadout/releases/tag/v{v}" in feed


def test_release_assets_refuse_a_tag_that_is_not_the_version(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_bytes(b"x")
    with pytest.raises(SystemExit, match="does not name"):
        release_assets.prepare(tmp_path / "a", tmp_path / "o", tag="v99.0.0", repo="o/n")


def test_release_workflow_builds_everything_and_drafts_a_release() -> None:
    data = _workflow("release.yml")
    assert data["on"]["push"]["tags"] == ["v*"]
    jobs = data["jobs"]
    for job in ("linux", "windows", "macos"):
        assert jobs[job]["uses"] == f"./.github/workflows/package-{job}.yml"
    publish = jobs["publish"]
    assert set(publish["needs"]) == {"linux", "windows", "macos"}
    assert publish["permissions"] == {"contents": "write"}
    runs = "\n".join(str(s.get("run", "")) for s in publish["steps"])
    assert "packaging/release_assets.py" in runs and "gh release create" in runs and "--draft" in runs
    for name in PACKAGE_WORKFLOWS:  # built once per tag: by release.yml, not by their own tag trigger
        on = _workflow(name)["on"]
        assert "workflow_call" in on and "push" not in on


def test_windows_setup_is_sliced_under_the_asset_limit() -> None:
    text = (ROOT / "packaging" / "windows" / "loadout.iss").read_text()
    assert re.search(r"^DiskSpanning=yes$", text, re.M)
    size = int(re.search(r"^DiskSliceSize=(\d+)$", text, re.M)[1])  # type: ignore[index]
    assert size < release_assets.LIMIT
    uploaded = "\n".join(
        _workflow("package-windows.yml")["jobs"]["package"]["steps"][-2]["with"]["path"].split()
    )
    assert "-setup.exe" in uploaded and "-setup-*.bin" in uploaded


# --- the dry run and the portability checks -------------------------------------------------------------
def test_workflows_dry_run_here() -> None:
    """Every bash step parses; the certificate import skips cleanly without secrets; the release
    step makes assets from stand-ins (the index check is left out: no network in tests)."""
    run = subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "ci_dryrun.py"), "--offline"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "RAN   package-macos.yml package: Signing certificate" in run.stdout
    assert "RAN   release.yml publish: Assets under 2 GiB" in run.stdout


def test_certificate_import_skips_cleanly_without_secrets(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "GITHUB_ENV": str(tmp_path / "env")}
    run = subprocess.run([str(ROOT / "packaging/macos/import_certificate.sh")], env=env, capture_output=True,
                         text=True)  # fmt: skip
    assert run.returncode == 0 and "unsigned" in run.stderr and not (tmp_path / "env").exists()
    env["MACOS_CERTIFICATE_P12"] = "AAAA"  # a certificate without its password: a clear refusal
    run = subprocess.run([str(ROOT / "packaging/macos/import_certificate.sh")], env=env, capture_output=True,
                         text=True)  # fmt: skip
    assert run.returncode == 1 and "MACOS_CERTIFICATE_PASSWORD" in run.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF files")
def test_glibc_floor_reads_what_the_binaries_ask_for(tmp_path: Path) -> None:
    python = Path(sys.executable).resolve()
    shutil.copy2(python, tmp_path / "python")
    (tmp_path / "notes.txt").write_text("GLIBC_9.99\0 in a text file does not count")
    found = glibc_floor.scan(tmp_path)
    assert list(found) == [tmp_path / "python"] and (2, 2) <= found[tmp_path / "python"] < (3,)
    assert glibc_floor.main([str(tmp_path), "--max", "2.0"]) == 1
    assert glibc_floor.main([str(tmp_path), "--max", "9.0"]) == 0
