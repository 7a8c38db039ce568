"""Generation through one long-lived session (the window's): a stop at any point leaves every model
as it was, so the next picture is the one an uninterrupted session makes; the prompt is encoded
once while only the seed or a UNet strength changes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.demo import DemoLibrary
from core.errors import InterruptedByUser
from core.generate.events import GenerateProgress
from core.generate.generator import Generator
from core.generate.request import ImageSettings, Sampling
from core.generate.session_run import Output
from core.memory.devices import cpu_device
from core.memory.policy import MemorySettings, VramState
from core.session import Placement, PlacementConfig, Session
from tests.fixtures.demo_copy import DemoAt

SETTINGS = ImageSettings("a harbour at dawn", "fog", Sampling(seed=11, steps=4, sampler="dpmpp_2m"), 64, 64)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _session(demo: DemoLibrary) -> tuple[Session, Generator]:
    card = PlacementConfig(
        MemorySettings(vram_state=VramState.NORMAL_VRAM, reserve_bytes=0), 6 << 20, 1 << 20
    )
    session = Session(Placement(cpu_device(0), card, cpu_is_device=True))
    session.load(demo.checkpoint, "checkpoint", lambda p: None, lambda: None)
    session.loras.add(demo.lora, 0.8, 0.8)
    return session, Generator(session)


def _picture(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


@pytest.mark.parametrize(("phase", "step"), [("text_encode", 0), ("sample", 2), ("decode", 0)])
def test_a_stop_in_any_phase_leaves_the_models_as_they_were(
    demo: DemoLibrary, tmp_path: Path, phase: str, step: int
) -> None:
    fresh_session, fresh = _session(demo)
    want = fresh.generate(
        SETTINGS, Output(tmp_path / "fresh.png"), lambda p: None, fresh_session.placement.manager.check
    )
    session, generator = _session(demo)

    def stop_at(p: GenerateProgress) -> None:
        if p.phase == phase and p.step == step:
            session.interrupt.set()

    with pytest.raises(InterruptedByUser):
        generator.generate(
            SETTINGS, Output(tmp_path / "stopped.png"), stop_at, session.placement.manager.check
        )
    assert not (tmp_path / "stopped.png").exists()
    session.interrupt.clear()
    got = generator.generate(
        SETTINGS, Output(tmp_path / "again.png"), lambda p: None, session.placement.manager.check
    )
    assert np.array_equal(_picture(got.images[0].path), _picture(want.images[0].path))


def test_a_new_seed_or_unet_strength_does_not_encode_the_prompt_again(
    demo: DemoLibrary, tmp_path: Path
) -> None:
    session, generator = _session(demo)
    check = session.placement.manager.check
    phases: list[str] = []
    generator.generate(SETTINGS, Output(tmp_path / "a.png"), lambda p: phases.append(p.phase), check)
    cache = generator.state.conditioning
    misses = cache.misses
    new_seed = ImageSettings(SETTINGS.prompt, SETTINGS.negative, Sampling(seed=12, steps=2), 64, 64)
    generator.generate(new_seed, Output(tmp_path / "b.png"), lambda p: None, check)
    lora_id = next(iter(session.loras.stack.entries))  # type: ignore[union-attr]
    session.loras.set_strength(lora_id, 0.3, None, bake=True)  # the UNet strength only
    generator.generate(new_seed, Output(tmp_path / "c.png"), lambda p: None, check)
    assert cache.misses == misses  # both prompts came from the cache
    session.loras.set_strength(lora_id, None, 0.2, bake=True)  # the text encoder's strength
    generator.generate(new_seed, Output(tmp_path / "d.png"), lambda p: None, check)
    assert cache.misses == misses + 2  # prompt and negative encoded again
