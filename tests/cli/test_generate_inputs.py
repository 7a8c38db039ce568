"""``loadout generate`` and friends with odd inputs: what they say and what they leave on disk
(issue 19: outputs, half-matching LoRAs, messages, interrupts at save time and at start-up)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from app.cli import main
from app.demo import DemoLibrary
from core.errors import InterruptedByUser, LoadoutError
from core.files.atomic import is_partial
from core.files.pickle_safe import load_pickle_state_dict
from core.generate.command import generate_files
from core.generate.events import GenerateProgress
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from tests.fixtures.demo_copy import DemoAt

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def half_lora(demo: DemoLibrary, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo LoRA plus as many modules that name nothing in the model."""
    tensors = load_file(str(demo.lora))
    extra = {k.replace("lora_te_text_model_encoder_layers_", "lora_te_text_model_encoder_nowhere_"): v.clone()
             for k, v in tensors.items()}  # fmt: skip
    path = tmp_path_factory.mktemp("lora") / "half.safetensors"
    save_file({**tensors, **extra}, str(path))
    return path


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _base(demo: DemoLibrary, out: Path) -> list[str]:
    return [
        "generate",
        str(demo.checkpoint),
        "--prompt",
        "a fox",
        "--steps",
        "1",
        "--size",
        "64x64",
        "-o",
        str(out),
    ]


def test_a_half_matching_lora_is_said_in_the_report_and_refused_with_strict(
    demo: DemoLibrary, half_lora: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run([*_base(demo, tmp_path / "a.png"), "--lora", str(half_lora), "--json"], capsys)
    assert code == 0, err
    (lora,) = json.loads(out)["loras"]
    assert (
        lora["unmatched"] > 0
        and lora["matched"] > 0
        and lora["modules"] == lora["matched"] + lora["unmatched"]
    )
    assert f"LoRA half.safetensors: {lora['unmatched']} of its {lora['modules']} modules fit nothing" in err
    code, out, err = _run([*_base(demo, tmp_path / "b.png"), "--lora", str(half_lora), "--strict"], capsys)
    assert (
        code == 2
        and "strict lora matching refuses" in err.lower()
        and "--strict" in err
        and not (tmp_path / "b.png").exists()
    )
    code, out, err = _run([*_base(demo, tmp_path / "c.png"), "--lora", str(demo.lora), "--strict"], capsys)
    assert code == 0, err  # a LoRA that applies whole passes


def test_a_grid_with_strict_refuses_a_half_matching_lora_in_every_cell(
    demo: DemoLibrary, half_lora: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "grid"
    args = [*_base(demo, out), "--lora", str(half_lora), "--strict", "--x", "seed:1,2", "--quiet"]
    code, _out, err = _run(args, capsys)
    refusals = [line for line in err.splitlines() if "half.safetensors fits only" in line]
    assert code == 1 and len(refusals) == 2, err  # each cell, with generate --strict's message
    assert not out.exists() or not any(out.glob("*.png"))


def test_generate_into_an_existing_folder_writes_inside_it(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "pics"
    folder.mkdir()
    code, out, err = _run(_base(demo, folder), capsys)
    assert code == 0, err
    (written,) = [Path(line) for line in out.splitlines()]
    assert folder in written.parents and written.suffix == ".png" and written.exists()
    assert not (tmp_path / "pics.png").exists()


@pytest.mark.parametrize("where", ["folder", "/proc/x.safetensors", "/dev/full"])
def test_convert_refuses_a_bad_destination_before_any_work(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    target = str(tmp_path) if where == "folder" else where
    code, _, err = _run(["convert", str(demo.checkpoint), "-o", target, "--dtype", "fp16", "--quiet"], capsys)
    assert code == 2 and "cannot write" in err and "disk space" not in err
    assert "convert 1/" not in err  # refused before the first tensor
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_ctrl_c_while_a_batch_is_saved_writes_none_of_it(demo: DemoLibrary, tmp_path: Path) -> None:
    """The batch is saved all or nothing: a stop after the first picture was encoded leaves nothing,
    so 'no picture was written' is true."""
    stop = threading.Event()

    def progress(p: GenerateProgress) -> None:
        if p.phase == "save" and p.step >= 1:
            stop.set()  # Ctrl-C while the rest of the batch is being saved

    request = GenerateRequest(
        ModelFiles(checkpoint=demo.checkpoint),
        ImageSettings("a fox", sampling=Sampling(steps=1), width=64, height=64, batch=4),
        output=tmp_path / "batch.png",
    )
    with pytest.raises(InterruptedByUser):
        generate_files(request, progress=progress, interrupt=stop)
    assert list(tmp_path.iterdir()) == []


def test_a_stopped_sweep_names_the_cells_it_kept(demo: DemoLibrary, tmp_path: Path) -> None:
    """A sweep saves each cell as it is done: stopped in the second cell, the first is kept and said."""
    from core.patching.merge import LoraArg
    from core.queue.grid import axis_of
    from core.queue.session_grid import SessionGrid, grid_files

    stop = threading.Event()

    def progress(p: GenerateProgress) -> None:
        if p.image == 1 and p.phase == "sample":
            stop.set()

    request = GenerateRequest(
        ModelFiles(checkpoint=demo.checkpoint),
        ImageSettings("a fox", sampling=Sampling(steps=2), width=64, height=64),
        loras=(LoraArg(demo.lora),),
        output=tmp_path / "s.png",
    )
    sweep = SessionGrid(axis_of("lora-strength", "0.5, 1.0"))
    with pytest.raises(InterruptedByUser) as err:
        grid_files(request, sweep, progress=progress, interrupt=stop)
    assert [Path(p).name for p in err.value.written] == ["s-0.5.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s-0.5.png"]


def _popen(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "app.cli", *args]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def _read_until(proc: subprocess.Popen[bytes], word: bytes) -> None:
    assert proc.stderr is not None
    seen = b""
    while word not in seen:
        c = proc.stderr.read(1)
        assert c, seen
        seen += c


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM")
def test_sigterm_stops_like_ctrl_c(demo: DemoLibrary, tmp_path: Path) -> None:
    out = tmp_path / "t.png"
    proc = _popen(
        "generate",
        str(demo.checkpoint),
        "--prompt",
        "x",
        "--steps",
        "3000",
        "--size",
        "64x64",
        "-o",
        str(out),
    )
    _read_until(proc, b"sample")
    proc.send_signal(signal.SIGTERM)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 130, err
    assert "stopped" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM")
def test_sigterm_during_convert_leaves_no_partial(tmp_path: Path) -> None:
    from tests.fixtures.st_files import write_tensors

    src = write_tensors(
        tmp_path / "in" / "big.safetensors", {f"w{i}": torch.ones(1024, 1024) for i in range(32)}
    )
    out = tmp_path / "out" / "big-fp16.safetensors"
    proc = _popen("convert", str(src), "-o", str(out), "--dtype", "fp16")
    _read_until(proc, b"convert 1/")
    proc.send_signal(signal.SIGTERM)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 130, err
    assert "Traceback" not in err and not out.exists()
    assert [p.name for p in out.parent.iterdir()] == []  # no .partial left behind


def test_ctrl_c_during_start_up_is_one_line(tmp_path: Path) -> None:
    proc = _popen("inspect", str(tmp_path))
    time.sleep(1.0)  # still importing torch
    proc.send_signal(signal.SIGINT)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 130, err
    assert "Traceback" not in err and err.strip().splitlines() == ["loadout: stopped."]


def test_a_folder_with_model_files_names_them(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("one.safetensors", "two.safetensors"):
        shutil.copy(demo.checkpoint, tmp_path / name)
    code, _, err = _run(["generate", str(tmp_path), "--prompt", "x", "-o", str(tmp_path / "o.png")], capsys)
    assert code == 2 and "no model files" not in err
    assert "one.safetensors" in err and "two.safetensors" in err and "Pick one of them" in err


def test_a_wrong_kind_says_its_kind_with_the_right_article_and_a_command(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "thing.safetensors"
    save_file({"some.weight": torch.ones(3, 3)}, str(junk))
    code, _, err = _run(["generate", str(junk), "--prompt", "x", "-o", str(tmp_path / "o.png")], capsys)
    assert code == 2 and "is a unknown" not in err and "a kind Loadout does not recognise" in err, err


def test_a_refused_pickle_is_said_in_loadouts_words(tmp_path: Path) -> None:
    import argparse

    path = tmp_path / "legacy.ckpt"
    torch.save({"state_dict": {"w": torch.ones(2)}, "args": argparse.Namespace(lr=1)}, path,
               _use_new_zipfile_serialization=False)  # fmt: skip
    with pytest.raises(LoadoutError) as err:
        load_pickle_state_dict(path)
    message = err.value.message
    assert "argparse.Namespace" in message and "weights_only" not in message and "\x1b" not in message


def test_no_partial_is_ever_listed(demo: DemoLibrary, tmp_path: Path) -> None:
    from core.library.sources import ModelRoot
    from core.library.walk import Walker

    shutil.copy(demo.checkpoint, tmp_path / "a.safetensors")
    (tmp_path / ".a.safetensors.123-0badcafe.partial").write_bytes(b"x")
    (tmp_path / ".b.safetensors.partial").write_bytes(b"x")
    assert is_partial(".a.safetensors.123-0badcafe.partial") and not is_partial("a.safetensors")
    listed = [item for batch in Walker([ModelRoot(tmp_path, None, "test")]) for item in batch]
    assert [item.path.name for item in listed] == ["a.safetensors"]
