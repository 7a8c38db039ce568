from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.fixtures.demo_copy import DemoAt

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` run only where CUDA works (run them on a lent GPU: `pytest -m gpu`)."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `pytest -m gpu` on a machine with one)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Torch on one thread for the test (``pytest.mark.usefixtures("one_thread")``): tiny models run
    as fast, pictures compare at the same thread count, and it does not spin against other tests."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def demo_library_at(tmp_path_factory: pytest.TempPathFactory) -> DemoAt:
    """``demo_library_at(folder)``: a fresh copy of the demo library in ``folder``, of one generated
    once per test process (tests/fixtures/demo_copy.py)."""
    from tests.fixtures.demo_copy import demo_copier

    return demo_copier(tmp_path_factory.mktemp("demo-master"))
