"""A picture's LoRAs applied as one session operation (``LoraControl.change``): the weights are
those the same changes give one at a time, followed once; a file that cannot be added leaves the
stack and the weights as they were."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from app.demo import DemoLibrary
from core.errors import LoadoutError
from core.generate.parameters import parse_parameters
from core.generate.picture_settings import plan_picture_settings
from core.library import Entry
from core.session import Placement, Session, SessionEvent
from core.session.loras import StackChange
from tests.fixtures.demo_copy import DemoAt


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def loras(demo: DemoLibrary, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("loras")
    return (
        Path(shutil.copy(demo.lora, folder / "inkwash.safetensors")),
        Path(shutil.copy(demo.lora, folder / "add_detail.safetensors")),
    )


def _session(demo: DemoLibrary, events: list[SessionEvent] | None = None) -> Session:
    session = Session(Placement(None), on_event=events.append if events is not None else None)
    session.load(demo.checkpoint, "checkpoint", lambda p: None, lambda: None)
    return session


def _weights(session: Session) -> dict[str, torch.Tensor]:
    stack = session.loras.stack
    assert stack is not None
    found = {}
    for name, patcher in stack.patchers.items():
        state = patcher.model.state_dict()
        for key in patcher.patched_keys():
            found[f"{name}.{key}"] = state[key].detach().clone()
    return found


def test_a_pictures_loras_in_one_operation_weigh_what_the_steps_one_by_one_do(
    demo: DemoLibrary, loras: tuple[Path, Path]
) -> None:
    inkwash, add_detail = loras
    events: list[SessionEvent] = []
    one_by_one, at_once = _session(demo), _session(demo, events)
    for session in (one_by_one, at_once):
        session.loras.add(inkwash, 1.0, 1.0)
    # the picture: add_detail at 0.6, inkwash's model at 0.5 and text encoder at 0.8 (A1111's
    # <lora:name:te:unet>)
    text = "a fox <lora:add_detail:0.6> <lora:inkwash:0.8:0.5>\nSteps: 4, Seed: 5, Size: 64x64"
    library = [
        Entry(p, "folder", p.parent, "", None, 1, 0, status="ok", kind="lora", family="sd1")
        for p in (inkwash, add_detail)
    ]
    loaded = at_once.loras.info().loras
    plan = plan_picture_settings(parse_parameters(text), demo.checkpoint, loaded, library)
    change = plan.stack_change()
    assert change.add == ((add_detail, 0.6, 0.6),) and change.strengths == ((loaded[0].id, 0.5, 0.8),)
    info = at_once.loras.change(change)

    one_by_one.loras.set_strength(loaded[0].id, 0.5, 0.8, bake=True)
    one_by_one.loras.add(add_detail, 0.6, 0.6)
    assert [(lo.path.name, lo.model_strength, lo.clip_strength) for lo in info.loras] == [
        ("inkwash.safetensors", 0.5, 0.8), ("add_detail.safetensors", 0.6, 0.6),
    ]  # fmt: skip
    want, got = _weights(one_by_one), _weights(at_once)
    assert want.keys() == got.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=0, atol=1e-6, msg=key)
    assert [e.label for e in events if e.kind == "lora"][-1] == "a picture's LoRAs"


def test_a_file_that_cannot_be_added_leaves_the_stack_and_weights_as_they_were(
    demo: DemoLibrary, loras: tuple[Path, Path], tmp_path: Path
) -> None:
    inkwash, add_detail = loras
    session = _session(demo)
    first = session.loras.add(inkwash, 1.0, 1.0).loras[0]
    before = _weights(session)
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"not a safetensors file")
    change = StackChange(disable=(first.id,), add=((add_detail, 0.5, 0.5), (broken, 1.0, 1.0)))
    with pytest.raises(LoadoutError):
        session.loras.change(change)
    info = session.loras.info()
    assert [(lo.path, lo.enabled) for lo in info.loras] == [(inkwash, True)]
    after = _weights(session)
    for key in before:
        assert torch.equal(after[key], before[key]), key
