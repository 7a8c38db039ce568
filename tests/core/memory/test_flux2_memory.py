"""The FLUX.2 memory profiles (derived from the released shapes, core/archs/flux2/net.py) against
what the activation tracker measures of a narrower FLUX.2 of the same ratios (128-wide heads, MLP
ratio 3, one double and one single block), with the test run's 512 text tokens, at 64 px batch 2
and 256 px: never below, at most 3 % above (the fit is 0.1-0.3 % above)."""

from __future__ import annotations

import pytest
import torch

from core.memory.inference import Workload, activation_bytes, network_profile
from core.memory.tracking import ActivationTracker
from core.models.flux2 import Flux2, Flux2Config
from core.session.testrun import RunConfig, _Inputs

pytestmark = pytest.mark.usefixtures("one_thread")


def _measured_step(model: torch.nn.Module, size: int, batch: int) -> int:
    inputs = _Inputs(model, RunConfig(1, size, size, batch, 0, torch.float32, "cpu"))
    x = inputs.noise.clone()
    roots = [v for v in vars(inputs).values() if isinstance(v, torch.Tensor)] + [x]
    with torch.inference_mode(), ActivationTracker(roots) as tracker:
        inputs.forward(model, x, 0.5)
    return tracker.peak_bytes


@pytest.mark.parametrize("family", ["flux2-klein-4b", "flux2-dev"])
def test_flux2_profiles_bound_a_narrower_flux2(family: str) -> None:
    config = Flux2Config(
        context_in_dim=96, hidden_size=512, num_heads=4, depth=1, depth_single_blocks=1,
        guidance_embed=family == "flux2-dev",
    )  # fmt: skip
    model = Flux2(config).eval()
    for t in model.parameters():
        t.data.zero_()
    profile, width = network_profile(family, model)
    assert (profile, width) == (family, 512)
    for size, batch in ((64, 2), (256, 1)):
        measured = _measured_step(model, size, batch)
        predicted = activation_bytes(profile, Workload(size, size, batch, 4, "cpu_flash"), width)
        print(f"{family} {size}px x{batch}: predicted / measured = {predicted / measured:.3f}")
        assert measured <= predicted <= 1.03 * measured, (size, batch, predicted / measured)
