"""A LoRA on the positive prompt only (ComfyUI's hook LoRA set on one conditioning), on CPU
weights: the positive's and the negative's entries run as separate calls (ComfyUI's
``calc_cond_batch`` splits ``hooked_to_run`` by hook group, in the order the groups' first entries
come), each with its own weights bit for bit; afterwards, and after a stop, the weights are the
stack's again. The PNG tag says ``on=`` and reads back."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from app.demo import DemoLibrary
from core.errors import InterruptedByUser, LoadoutError
from core.generate.generator import Generator
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.session_run import Output
from core.regions import Box, Region
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
from tests.fixtures.demo_copy import DemoAt


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


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


def test_a_lora_on_a_region_runs_with_that_regions_call_only(session: Session, tmp_path: Path) -> None:
    """The region's entry and the copy of its area in the negative's list (ComfyUI's copy keeps
    its hooks) run as one call with the LoRA; the two prompts' own entries as one call without."""
    lora_id = next(iter(session.loras.stack.entries))  # type: ignore[union-attr]
    session.loras.set_on(lora_id, "region1")
    settings = replace(SETTINGS, regions=(Region("a red boat", Box(0, 0, 32, 32)),))
    try:
        _, layer = patched_layer(session)
        calls: list[tuple[torch.Tensor, torch.Tensor]] = []
        hook = layer.register_forward_hook(lambda m, a, o: calls.append((a[0].detach(), o.detach())))
        out = Output(tmp_path / "r.png")
        Generator(session).generate(settings, out, lambda p: None, session.placement.manager.check)
        hook.remove()
        without, with_lora = cpu_weights(session)
        assert [x.shape[0] for x, _ in calls] == [2, 2] * SETTINGS.sampling.steps
        bias = None if layer.bias is None else layer.bias.detach()
        for i, (x, o) in enumerate(calls):
            w = without if i % 2 == 0 else with_lora
            assert torch.equal(o, F.linear(x, w.to(x.dtype), None if bias is None else bias.to(x.dtype))), i
        with pytest.raises(LoadoutError, match="the settings have 0 region"):
            Generator(session).generate(SETTINGS, out, lambda p: None, session.placement.manager.check)
    finally:
        session.loras.set_on(lora_id, "positive")
