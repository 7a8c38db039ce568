"""The sampler's model patches (core.sampling.patches): wrappers see every network call with its
sigma and run outermost first, extra inputs reach the network after them, a guidance function
replaces CFG's combination, step callbacks hear every step; none of them changes a run that
gives back what it gets."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from core.errors import LoadoutError
from core.models.patches import NO_PATCHES, NetworkPatches
from core.sampling import SamplingRequest, empty_latent, for_family, latent_format_for, sample
from core.sampling.conditioning import Conditioning
from core.sampling.patches import NO_MODEL_PATCHES, Apply, CfgCall, ModelCall, ModelPatches, StepInfo
from tests.core.sampling.toy import ToyNet, toy_conditioning

REQUEST = SamplingRequest(seed=2, steps=4, cfg=6.0, sampler="euler")


def _run(net: object, patches: ModelPatches = NO_MODEL_PATCHES) -> Tensor:
    ms, fmt = for_family("sd1"), latent_format_for("sd1")
    pos, neg = toy_conditioning(1)
    latent = empty_latent(1, 64, 64, fmt)
    return sample(net, ms, fmt, latent, pos, neg, REQUEST, patches=patches)  # type: ignore[arg-type]


def test_wrappers_see_every_call_outermost_first_and_can_change_it() -> None:
    order: list[str] = []
    sigmas: list[float] = []

    def outer(call: ModelCall, apply: Apply) -> Tensor:
        order.append("outer")
        sigmas.append(float(call.sigma[0]))
        return apply(call)

    def inner(call: ModelCall, apply: Apply) -> Tensor:
        order.append("inner")
        return apply(call)

    plain = _run(ToyNet(1 / 1000, 4))
    same = _run(ToyNet(1 / 1000, 4), ModelPatches(wrappers=(outer, inner)))
    assert torch.equal(same, plain)
    assert order == ["outer", "inner"] * 4 and len(set(sigmas)) == 4

    def louder(call: ModelCall, apply: Apply) -> Tensor:
        return apply(call) * 1.1

    assert not torch.allclose(_run(ToyNet(1 / 1000, 4), ModelPatches(wrappers=(louder,))), plain)


def test_extra_inputs_are_appended_after_the_wrappers() -> None:
    seen: list[int] = []

    def net(x: Tensor, t: Tensor, cond: Conditioning, patches: NetworkPatches = NO_PATCHES) -> Tensor:
        seen.append(x.shape[1])
        return x[:, :4] * 0.5

    def wrapper(call: ModelCall, apply: Apply) -> Tensor:
        seen.append(-call.x.shape[1])  # the wrapper sees the latent alone
        return apply(call)

    _run(net, ModelPatches(wrappers=(wrapper,), extra_inputs=(lambda x: x[:, :1] * 0,)))
    assert seen[:2] == [-4, 5]


def test_a_guidance_function_replaces_cfg_and_step_callbacks_hear_every_step() -> None:
    def cfg(call: CfgCall) -> Tensor:
        return call.uncond + (call.cond - call.uncond) * call.scale

    steps: list[StepInfo] = []
    plain = _run(ToyNet(1 / 1000, 4))
    same = _run(ToyNet(1 / 1000, 4), ModelPatches(guidance=cfg, steps=(steps.append,)))
    assert torch.equal(same, plain)
    assert [s.step for s in steps] == [1, 2, 3, 4] and float(steps[-1].sigma) > 0
    positive_only = _run(ToyNet(1 / 1000, 4), ModelPatches(guidance=lambda call: call.cond))
    assert not torch.allclose(positive_only, plain)
    with pytest.raises(LoadoutError, match="replace classifier-free guidance"):
        _ = ModelPatches(guidance=cfg) + ModelPatches(guidance=cfg)


def test_cfg_stages_run_pre_then_guidance_then_post_and_post_can_run_the_network_again() -> None:
    order: list[str] = []
    seen: list[NetworkPatches] = []

    def net(x: Tensor, t: Tensor, cond: Conditioning, patches: NetworkPatches = NO_PATCHES) -> Tensor:
        seen.append(patches)
        return x * 0.5

    def pre(call: CfgCall) -> CfgCall:
        order.append("pre")
        return call

    def post(call: CfgCall, denoised: Tensor) -> Tensor:
        order.append("post")
        again = call.predict_positive(NetworkPatches(blocks=(lambda h, site: h,)))
        assert again.shape == denoised.shape
        return denoised

    def guidance(call: CfgCall) -> Tensor:
        order.append("cfg")
        return call.cfg()

    plain = _run(net)
    seen.clear()
    same = _run(net, ModelPatches(pre_cfg=(pre,), guidance=guidance, post_cfg=(post,)))
    assert torch.equal(same, plain)
    assert order == ["pre", "cfg", "post"] * 4
    assert [len(p.blocks) for p in seen] == [0, 1] * 4  # each step: the batch, then the re-run
