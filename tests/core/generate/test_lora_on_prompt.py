"""A LoRA on the positive prompt only (ComfyUI's hook LoRA set on one conditioning), on CPU
weights: the positive's and the negative's entries run as separate calls (ComfyUI's
``calc_cond_batch`` splits ``hooked_to_run`` by hook group, in the order the groups' first entries
come), each with its own weights bit for bit; afterwards, and after a stop, the weights are the
stack's again. The PNG tag says ``on=`` and reads back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from app.demo import DemoLibrary, ensure_demo_library
from core.errors import InterruptedByUser
from core.generate.generator import Generator
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.session_run import Output
from core.session import Session
from tests.core.generate.lora_on_prompt_case import (
    SETTINGS,
    STRENGTH,
    check_calls,
    cpu_weights,
    generate_recording,
    patched_layer,
    session_with,
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLibrary:
    return ensure_demo_library(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def session(demo: DemoLibrary) -> Session:
    return session_with(demo, "positive")


def test_each_prompts_call_runs_its_own_weights(demo: DemoLibrary, session: Session, tmp_path: Path) -> None:
    made, calls = generate_recording(session, tmp_path / "p.png")
    check_calls(session, calls, "positive", cpu_weights(session))
    key, layer = patched_layer(session)
    entry = next(iter(session.loras.stack.entries.values()))  # type: ignore[union-attr]
    assert entry.model_strength == STRENGTH and entry.on == "positive"
    baked = session.loras.stack.patchers["diffusion_model"].patched_weight(key, cache=False)[0]  # type: ignore[union-attr]
    assert torch.equal(layer.weight, baked)  # between generations the stack's weights again
    text = read_png_parameters(made.images[0].path)
    assert f"<lora:{demo.lora.stem}:{STRENGTH:g}:on=positive>" in text
    assert parse_parameters(text).loras[0].on == "positive"


def test_a_stop_puts_the_stack_back(session: Session, tmp_path: Path) -> None:
    _, layer = patched_layer(session)
    before = layer.weight.detach().clone()
    steps = 0

    def stop(p: object) -> None:
        nonlocal steps
        if getattr(p, "phase", "") == "sample":
            steps += 1
            if steps == 2:
                session.interrupt.set()

    with pytest.raises(InterruptedByUser):
        Generator(session).generate(
            SETTINGS, Output(tmp_path / "x.png"), stop, session.placement.manager.check
        )
    session.interrupt.clear()
    assert torch.equal(layer.weight, before)
    assert not (tmp_path / "x.png").exists()
