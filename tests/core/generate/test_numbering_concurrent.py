"""Two writers, one folder: numbered pictures written by several real processes at once are all
kept under distinct names (none overwritten, each writer told the name it got); a grid's folder is
held by one grid at a time and never written over; grid folders are handed out exclusively."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from core.files.atomic import OutputExists
from core.generate.naming import grid_folder, new_folder
from core.generate.png import read_png_parameters

ROOT = Path(__file__).resolve().parents[3]

WRITER = textwrap.dedent(
    """
    import sys, time, random
    import torch
    from pathlib import Path
    from core.generate.parameters import GenerationParameters
    from core.generate.session_run import Output
    folder, name, seed = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    output = Output(folder, is_folder=True)
    print("ready", flush=True)
    sys.stdin.readline()  # all start at once
    for round_ in range(6):
        batch = rng.choice([1, 1, 2, 3])
        params = GenerationParameters(prompt=f"{name} {round_}", negative="", steps=1, sampler="euler",
                                      scheduler="normal", cfg=1.0, seed=5, width=8, height=8)
        images = output.save(torch.zeros(batch, 3, 8, 8), params, 5, lambda: None)
        for image in images:
            print(image.path, f"{name} {round_}", flush=True)
    """
)


def test_numbered_pictures_from_concurrent_processes_never_overwrite_each_other(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), f"w{i}", str(i)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "", "OMP_NUM_THREADS": "1"},
        )
        for i in range(3)
    ]
    for proc in procs:  # every writer past its imports, then all at once
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    said: dict[Path, str] = {}
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        for line in out.splitlines():
            path, prompt = line.split(" ", 1)
            assert Path(path) not in said, f"two writers were told {path}"
            said[Path(path)] = prompt
    on_disk = sorted(p for p in tmp_path.rglob("*.png"))
    assert sorted(said) == on_disk  # each told name exists, nothing else was written
    for path, prompt in said.items():  # and holds that writer's picture, not another's
        assert read_png_parameters(path).splitlines()[0] == prompt
    numbers = sorted(int(p.name.split("-")[0]) for p in on_disk)
    assert len(set(numbers)) == len(numbers)


HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from core.generate.naming import grid_folder
    with grid_folder(Path(sys.argv[1])):
        print("holding", flush=True)
        sys.stdin.readline()
    """
)


def test_a_grid_folder_is_held_by_one_grid_and_an_earlier_grid_is_never_overwritten(tmp_path: Path) -> None:
    folder = tmp_path / "grid"
    other = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""},
    )  # fmt: skip
    assert other.stdout is not None and other.stdin is not None
    try:
        assert other.stdout.readline().strip() == "holding"
        with pytest.raises(OutputExists, match="another grid is being written"), grid_folder(folder):
            pass
    finally:
        other.stdin.write("\n")
        other.stdin.flush()
        other.wait()
    with grid_folder(folder):  # free again: this grid writes its cells
        (folder / "x0-y0-z0.png").write_bytes(b"first grid")
    with (
        pytest.raises(OutputExists, match=r"already holds a grid's pictures \(x0-y0-z0.png\)"),
        grid_folder(folder),
    ):
        pass
    assert (folder / "x0-y0-z0.png").read_bytes() == b"first grid"


MAKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from core.generate.naming import grid_folder, new_folder
    start = float(sys.argv[2])
    while time.time() < start:
        time.sleep(0.0005)
    print(new_folder(Path(sys.argv[1]), "20260101-120000"), flush=True)
    """
)


def test_grid_folders_queued_in_the_same_second_are_distinct(tmp_path: Path) -> None:
    start = time.time() + 1.5
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MAKER, str(tmp_path), str(start)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": ""},
        )
        for _ in range(4)
    ]
    made = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert len(set(made)) == 4 and all(Path(m).is_dir() for m in made)
    assert new_folder(tmp_path, "20260101-120000").name == "20260101-120000-5"
