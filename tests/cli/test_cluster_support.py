"""Without Ray (the optional cluster extra; the ready-to-run downloads never carry it) the command
line says in plain words what to do, never Python's ModuleNotFoundError or "a bug in Loadout".
Ray is blocked for each test through ``sys.modules`` (``import ray`` then raises ImportError, as on
a machine without it), the installed copy stays as it is."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import core.queue
from app.cli import main
from core.queue.cluster_support import INSTALL, ClusterUnavailable, ray_pool_module
from tests.fixtures.layouts_diffusion import sd1_checkpoint
from tests.fixtures.st_files import write_sparse


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    for name in [m for m in sys.modules if m == "core.queue.ray_pool" or m.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(core.queue, "ray_pool", raising=False)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real SD1 checkpoint layout, sparse (the Ray check comes before any weight is read)."""
    return write_sparse(tmp_path_factory.mktemp("models") / "sd1.safetensors", sd1_checkpoint())


def test_a_python_install_is_told_how_to_add_ray(no_ray: None) -> None:
    with pytest.raises(ClusterUnavailable) as caught:
        ray_pool_module()
    message = caught.value.message
    assert message.startswith("Ray is not installed.") and INSTALL in message
    assert caught.value.code == "cluster_unavailable"


def test_a_download_is_told_it_has_no_cluster_support_and_what_to_do(
    no_ray: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # as in the PyInstaller bundle
    with pytest.raises(ClusterUnavailable) as caught:
        ray_pool_module()
    message = caught.value.message
    assert message.startswith("This download of Loadout cannot run jobs on a Ray cluster.")
    assert "Run the jobs on this computer" in message and "Python package" in message and INSTALL in message


def test_another_missing_module_is_not_blamed_on_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    monkeypatch.delitem(sys.modules, "core.queue.ray_pool", raising=False)
    monkeypatch.delattr(core.queue, "ray_pool", raising=False)
    monkeypatch.setitem(sys.modules, "core.queue.runner", None)  # ray_pool imports it
    with pytest.raises(ImportError):
        ray_pool_module()


@pytest.mark.parametrize("frozen", [False, True])
def test_generate_ray_without_ray_says_so_in_plain_words(
    no_ray: None, checkpoint: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, frozen: bool
) -> None:
    if frozen:
        monkeypatch.setattr(sys, "frozen", True, raising=False)
    out = tmp_path / "grid"
    code = main([
        "generate", str(checkpoint), "--prompt", "a fox", "--steps", "1", "--size", "64x64",
        "--x", "seed:1,2", "--ray", "local:2", "-o", str(out),
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert "bug" not in err and "ModuleNotFoundError" not in err and "Traceback" not in err
    lead = "This download of Loadout cannot run jobs" if frozen else "Ray is not installed"
    assert err.startswith(f"loadout: {lead}") and INSTALL in err
    assert not any(out.rglob("*.png")), "nothing ran"
