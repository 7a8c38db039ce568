"""A LoRA schedule in a real generation: at every network call the patched layer's output is the
one of the LoRA baked at that step's strength, bit for bit (CPU weights and a simulated card's
placed copies), the weights change only at keyframes, and the LoRA is back at its own strength
afterwards (also after a stop). The PNG says the schedule and reads it back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from app.demo import DemoLibrary
from core.detect.catalog import diffusion_spec
from core.errors import InterruptedByUser, LoadoutError
from core.generate.generator import Generator
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.request import ImageSettings, Sampling
from core.generate.session_run import Output
from core.memory.devices import cpu_device
from core.memory.policy import MemorySettings, VramState
from core.patching.schedule import KeyframeClock, parse_schedule, read_schedules
from core.sampling.model_sampling import ModelSampling, from_spec
from core.sampling.sigmas import ksampler_sigmas
from core.session import Placement, PlacementConfig, Session
from core.session.slots import SlotId
from tests.fixtures.demo_copy import DemoAt

STRENGTH = 0.8


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def _session(demo: DemoLibrary, strength: float, *, card: bool) -> Session:
    if card:  # weights placed on a simulated device: the mover patches copies, streamed layers at cast
        config = PlacementConfig(
            MemorySettings(vram_state=VramState.NORMAL_VRAM, reserve_bytes=0), 6 << 20, 1 << 20
        )
        session = Session(Placement(cpu_device(0), config, cpu_is_device=True))
    else:
        session = Session()
    session.load(demo.checkpoint, "checkpoint", lambda p: None, lambda: None)
    session.loras.add(demo.lora, strength, STRENGTH)
    return session


def _layer(session: Session) -> tuple[str, nn.Linear]:
    stack = session.loras.stack
    assert stack is not None
    entry = next(iter(stack.entries.values()))
    model = stack.patchers["diffusion_model"].model
    for key in entry.keys["diffusion_model"]:
        layer = model.get_submodule(key.removesuffix(".weight"))
        if isinstance(layer, nn.Linear) and "attn2.to_k" not in key:  # on the latent's path
            return key, layer
    raise AssertionError("the demo LoRA patches no linear layer")


def _settings(schedule: str) -> ImageSettings:
    lora = f"{schedule}"
    return ImageSettings(
        "a lighthouse", "blur", Sampling(seed=5, steps=4, sampler="euler", scheduler="normal"), 64, 64,
        lora_schedules=(parse_schedule(lora),),
    )  # fmt: skip


@pytest.mark.parametrize("card", [False, True], ids=["cpu-weights", "simulated-card"])
def test_each_call_runs_the_weights_of_its_steps_strength(
    demo: DemoLibrary, tmp_path: Path, card: bool
) -> None:
    session = _session(demo, STRENGTH, card=card)
    name = next(iter(session.loras.stack.entries))  # type: ignore[union-attr]
    settings = _settings(f"{name}=1@0, 0.25@0.5, 0@0.75")
    key, layer = _layer(session)
    calls: list[tuple[torch.Tensor, torch.Tensor]] = []
    hook = layer.register_forward_hook(lambda m, args, out: calls.append((args[0].detach(), out.detach())))
    generator = Generator(session)
    made = generator.generate(
        settings, Output(tmp_path / "s.png"), lambda p: None, session.placement.manager.check
    )
    hook.remove()

    # the strength each call should have, by ComfyUI's keyframe rules over this run's sigmas
    ms = _model_sampling(session)
    sigmas = ksampler_sigmas(ms, settings.sampling.scheduler, settings.sampling.sampler, 4, 1.0)
    schedule = settings.lora_schedules[0]
    clock = KeyframeClock(schedule.keyframes, [ms.percent_to_sigma(k.start) for k in schedule.keyframes],
                          float(sigmas[0]))  # fmt: skip
    wanted = [STRENGTH * clock.strength(float(s)) for s in sigmas[:-1]]
    assert len(calls) == len(wanted) == 4  # euler with CFG: one batched call per step
    assert len(set(wanted)) == 3

    weights: dict[float, tuple[torch.Tensor, torch.Tensor | None]] = {}
    for strength in set(wanted):  # the LoRA baked at each strength on the CPU, from scratch
        baked = _session(demo, strength, card=False)
        _, static = _layer(baked)
        weights[strength] = (
            static.weight.detach().clone(),
            None if static.bias is None else static.bias.detach(),
        )
    for (x, out), strength in zip(calls, wanted, strict=True):
        w, b = weights[strength]
        expected = F.linear(x, w.to(x.dtype), None if b is None else b.to(x.dtype))
        assert torch.equal(out, expected), f"the call at strength {strength} ran other weights"

    # afterwards the stack is at its own strength again: the next picture is the unscheduled one's
    entry = next(iter(session.loras.stack.entries.values()))  # type: ignore[union-attr]
    assert entry.model_strength == STRENGTH
    params = parse_parameters(read_png_parameters(made.images[0].path))
    assert read_schedules(params.extra["LoRA schedules"]) == settings.lora_schedules
    del key


def _model_sampling(session: Session) -> ModelSampling:
    family = session.model(SlotId.MAIN).family
    assert family is not None
    return from_spec(diffusion_spec(family).sampling, family)


def test_a_stop_puts_the_lora_back_at_its_strength(demo: DemoLibrary, tmp_path: Path) -> None:
    session = _session(demo, STRENGTH, card=False)
    name = next(iter(session.loras.stack.entries))  # type: ignore[union-attr]
    _, layer = _layer(session)
    before = layer.weight.detach().clone()
    steps = 0

    def stop(p: object) -> None:
        nonlocal steps
        if getattr(p, "phase", "") == "sample":
            steps += 1
            if steps == 3:
                session.interrupt.set()

    with pytest.raises(InterruptedByUser):
        Generator(session).generate(_settings(f"{name}=1@0, 0@0.3"), Output(tmp_path / "x.png"), stop,
                                    session.placement.manager.check)  # fmt: skip
    session.interrupt.clear()
    assert torch.equal(layer.weight, before)
    assert not (tmp_path / "x.png").exists()


def test_a_schedule_of_a_lora_not_in_the_stack_is_refused(demo: DemoLibrary, tmp_path: Path) -> None:
    session = _session(demo, STRENGTH, card=False)
    with pytest.raises(LoadoutError, match="not in the LoRA stack"):
        Generator(session).generate(_settings("nope=1@0"), Output(tmp_path / "y.png"), lambda p: None,
                                    session.placement.manager.check)  # fmt: skip


def test_the_cli_takes_a_schedule_and_refuses_a_bad_one(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli import main

    base = ["generate", str(demo.checkpoint), "--prompt", "a fox", "--lora", f"{demo.lora}:0.8",
            "--seed", "3", "--steps", "3", "--size", "64x64"]  # fmt: skip
    assert main([*base, "--lora-schedule", f"{demo.lora.stem}=1@0,0@0.5", "-o", str(tmp_path / "s.png")]) == 0
    params = parse_parameters(read_png_parameters(tmp_path / "s.png"))
    assert params.extra["LoRA schedules"] == f"{demo.lora.stem}: 1@0 0@0.5"
    capsys.readouterr()
    assert main([*base, "--lora-schedule", f"{demo.lora.stem}=1@2", "-o", str(tmp_path / "b.png")]) == 2
    err = capsys.readouterr().err
    assert "starts outside the sampling" in err and "Traceback" not in err
    assert not (tmp_path / "b.png").exists()
