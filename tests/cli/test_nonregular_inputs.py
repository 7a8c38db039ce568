"""FIFOs, devices, sockets and folders given as inputs never block a command: every input is
opened so that it cannot wait (core/files/leases.py open_input / open_regular) and refused in
words, for checkpoints, LoRAs, --init, convert, merge, run, check, inspect and grids."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli import main
from app.demo import DemoLibrary
from core.errors import LoadoutError
from core.files.leases import open_regular
from core.files.model_file import read_tensor_index
from tests.fixtures.demo_copy import DemoAt

WAIT = float(
    os.environ.get("LOADOUT_TEST_FIFO_WAIT", "60")
)  # a command still in open() after this long is blocked: the test opens the pipe's other end


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "p.safetensors"
    os.mkfifo(path)
    blocked: list[bool] = []
    done = threading.Event()

    def unblock() -> None:  # a reader stuck in open() is let go, so a failing test does not hang
        if not done.wait(WAIT):
            blocked.append(True)
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)

    watchdog = threading.Thread(target=unblock, daemon=True)
    watchdog.start()
    yield path
    done.set()
    watchdog.join()
    assert not blocked, f"the command blocked on the FIFO {path} for {WAIT} s"


def _special_files(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    sock_path = tmp_path / "socket.safetensors"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    server.close()
    return {"a named pipe": fifo, "a socket": sock_path, "a character device": Path("/dev/zero")}


def test_every_kind_of_special_file_is_refused_without_opening_it_blocking(tmp_path: Path) -> None:
    from core.files.leases import open_input

    for words, path in _special_files(tmp_path).items():
        assert open_regular(path) is None
        with pytest.raises(LoadoutError, match="is not a regular file") as caught:
            open_input(path).close()
        assert words in caught.value.message and caught.value.code == "not_a_file"
        with pytest.raises(LoadoutError, match="is not a regular file"):
            read_tensor_index(path)
    with pytest.raises(IsADirectoryError):
        open_input(tmp_path)
    regular = tmp_path / "r.bin"
    regular.write_bytes(b"abc")
    with open_input(regular) as fh:  # a regular file reads as blocking as ever
        assert fh.read() == b"abc" and os.get_blocking(fh.fileno())
    opened = open_regular(regular)
    assert opened is not None and stat.S_ISREG(opened[1].st_mode)
    os.close(opened[0])


def test_a_symlink_loop_is_named_a_loop(tmp_path: Path) -> None:
    loop = tmp_path / "loop.safetensors"
    loop.symlink_to(loop)
    with pytest.raises(LoadoutError, match="leads back to itself") as caught:
        read_tensor_index(loop)
    assert "permission" not in caught.value.message


def _cases(demo: DemoLibrary, fifo: Path, tmp_path: Path) -> dict[str, list[str]]:
    ckpt, lora = str(demo.checkpoint), str(demo.lora)
    gen = ["generate", "--prompt", "a fox", "--steps", "1", "--size", "64x64"]
    return {
        "inspect": ["inspect", "--json", str(fifo)],
        "check": ["check", str(fifo)],
        "generate checkpoint": [*gen[:1], str(fifo), *gen[1:], "-o", str(tmp_path / "a.png")],
        "generate --lora": [*gen[:1], ckpt, *gen[1:], "--lora", str(fifo), "-o", str(tmp_path / "b.png")],
        "generate --init": [
            *gen[:1],
            ckpt,
            *gen[1:],
            "--init",
            str(fifo),
            "--denoise",
            "0.5",
            "-o",
            str(tmp_path / "c.png"),
        ],
        "grid --lora": [
            *gen[:1],
            ckpt,
            *gen[1:],
            "--lora",
            str(fifo),
            "--x",
            "seed:1,2",
            "-o",
            str(tmp_path / "g"),
        ],
        "convert": ["convert", str(fifo), "-o", str(tmp_path / "c.safetensors")],
        "merge base": ["merge", str(fifo), "--lora", lora, "-o", str(tmp_path / "m.safetensors")],
        "merge --lora": ["merge", ckpt, "--lora", str(fifo), "-o", str(tmp_path / "n.safetensors")],
        "run": ["run", str(fifo), "--steps", "1", "--json"],
    }


@pytest.mark.parametrize(
    "case",
    ["inspect", "check", "generate checkpoint", "generate --lora", "generate --init", "grid --lora",
     "convert", "merge base", "merge --lora", "run"],
)  # fmt: skip
def test_a_fifo_given_to_any_command_is_refused_in_words(
    demo: DemoLibrary, fifo: Path, tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_cases(demo, fifo, tmp_path)[case])
    out, err = capsys.readouterr()
    assert code in (1, 2), (code, err)
    said = json.loads(out)[0]["error"]["message"] if case == "inspect" else out + err
    assert "is not a regular file" in said and "named pipe" in said, said
    assert "Traceback" not in err
