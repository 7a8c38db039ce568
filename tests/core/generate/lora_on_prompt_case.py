"""What the tests of a LoRA on one prompt share: a session with the demo LoRA on one prompt, the
patched layer the calls are recorded at, and the check that each call ran its own weights."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from app.demo import DemoLibrary
from core.generate.generator import Generator
from core.generate.request import ImageSettings, Sampling
from core.generate.session_run import GenerateResult, Output
from core.memory.devices import cpu_device
from core.memory.policy import MemorySettings, VramState
from core.session import Placement, PlacementConfig, Session

STRENGTH = 0.8
SETTINGS = ImageSettings("a lighthouse", "blur", Sampling(seed=5, steps=2, cfg=5.0), 64, 64)


def session_with(demo: DemoLibrary, on: str | None, *, card: bool = False) -> Session:
    if card:  # weights placed on a simulated device: the mover patches copies, streamed layers at cast
        config = PlacementConfig(
            MemorySettings(vram_state=VramState.NORMAL_VRAM, reserve_bytes=0), 6 << 20, 1 << 20
        )
        session = Session(Placement(cpu_device(0), config, cpu_is_device=True))
    else:
        session = Session()
    session.load(demo.checkpoint, "checkpoint", lambda p: None, lambda: None)
    session.loras.add(demo.lora, STRENGTH, STRENGTH, on=on)
    return session


def patched_layer(session: Session) -> tuple[str, nn.Linear]:
    """A linear layer on the latent's path that the LoRA patches."""
    stack = session.loras.stack
    assert stack is not None
    entry = next(iter(stack.entries.values()))
    model = stack.patchers["diffusion_model"].model
    for key in entry.keys["diffusion_model"]:
        layer = model.get_submodule(key.removesuffix(".weight"))
        if isinstance(layer, nn.Linear) and "attn2.to_k" not in key:
            return key, layer
    raise AssertionError("the demo LoRA patches no linear layer")


def generate_recording(
    session: Session, out: Path
) -> tuple[GenerateResult, list[tuple[torch.Tensor, torch.Tensor]]]:
    """One picture of :data:`SETTINGS`; every call of the patched layer (input, output)."""
    _, layer = patched_layer(session)
    calls: list[tuple[torch.Tensor, torch.Tensor]] = []
    hook = layer.register_forward_hook(lambda m, args, o: calls.append((args[0].detach(), o.detach())))
    try:
        made = Generator(session).generate(
            SETTINGS, Output(out), lambda p: None, session.placement.manager.check
        )
    finally:
        hook.remove()
    return made, calls


def cpu_weights(session: Session) -> tuple[torch.Tensor, torch.Tensor]:
    """(the layer's weight without the LoRA, baked with it at its strength) of a session whose
    weights are on the CPU (on a card the module holds the placed copy, not the file's)."""
    key, _ = patched_layer(session)
    patcher = session.loras.stack.patchers["diffusion_model"]  # type: ignore[union-attr]
    return patcher.original(key), patcher.patched_weight(key, cache=False)[0]


def check_calls(
    session: Session,
    calls: list[tuple[torch.Tensor, torch.Tensor]],
    on: str,
    weights: tuple[torch.Tensor, torch.Tensor],
) -> None:
    """Two calls a step, never batched together, the positive's group first (the first entry of
    the list is the positive's own); the targeted prompt's call with the LoRA baked at its
    strength, the other's with the file's weights (``weights``: :func:`cpu_weights`), bit for bit."""
    assert len(calls) == 2 * SETTINGS.sampling.steps
    assert all(x.shape[0] == 1 for x, _ in calls)
    _, layer = patched_layer(session)
    without, with_lora = weights
    assert not torch.equal(with_lora, without)
    bias = None if layer.bias is None else layer.bias.detach()
    for i, (x, out) in enumerate(calls):
        positive = i % 2 == 0
        w = with_lora if positive == (on == "positive") else without
        expected = F.linear(x, w.to(x.dtype), None if bias is None else bias.to(x.dtype))
        side = "positive" if positive else "negative"
        assert torch.equal(out, expected), f"call {i} (the {side} prompt's) ran other weights"
