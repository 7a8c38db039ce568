"""A stop that lands at a cell boundary of a grid (a signal, or an input truncated meanwhile)
stops the grid: it is never cleared by the next cell, the command exits non-zero, and what it says
was kept is exactly the cells' pictures on disk."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.commands.stopping import report_stop
from app.demo import DemoLibrary
from core.errors import InterruptedByUser
from core.queue.command import run_grid
from core.queue.grid import parse_axis
from core.queue.store import Totals
from tests.core.queue.test_queue_run import _request
from tests.fixtures.demo_copy import DemoAt


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def test_a_stop_at_a_cell_boundary_stops_the_grid_and_counts_the_pictures_on_disk(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    interrupt = threading.Event()
    folder = tmp_path / "grid"

    def at_boundary(totals: Totals) -> None:  # called between cells: the first is done, none runs
        if totals.done == 1:
            interrupt.set()

    with pytest.raises(InterruptedByUser) as caught:
        run_grid(
            _request(demo, steps=1), folder, (parse_axis("seed:1,2,3,4,5,6"), None, None),
            progress=at_boundary, interrupt=interrupt,
        )  # fmt: skip
    on_disk = sorted(str(p) for p in folder.glob("x*-y*-z*.png"))
    assert 1 <= len(on_disk) < 6, on_disk  # stopped: not every cell was made
    assert sorted(caught.value.written) == on_disk
    assert report_stop(caught.value) == 130
    said = capsys.readouterr().err
    assert f"{len(on_disk)} picture(s) finished before the stop were kept" in said
    assert "no picture was written" not in said
