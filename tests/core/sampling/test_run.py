"""The KSampler run around the samplers: CFG batching, the cfg == 1 shortcut, interrupts,
progress, dtypes and bad input."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import Tensor

from core.errors import InterruptedByUser, LoadoutError
from core.models.patches import NO_PATCHES, NetworkPatches
from core.sampling import (
    CfgDenoiser,
    Conditioning,
    ModelDenoiser,
    SamplingRequest,
    StepProgress,
    empty_latent,
    for_family,
    latent_format_for,
    sample,
)
from tests.core.sampling.toy import ToyNet, family_setup, toy_conditioning


def _run(net: ToyNet, request: SamplingRequest, **kw: object) -> torch.Tensor:
    ms, fmt = for_family("sd1"), latent_format_for("sd1")
    pos, neg = toy_conditioning(2)
    return sample(net, ms, fmt, empty_latent(2, 64, 64, fmt), pos, neg, request, **kw)  # type: ignore[arg-type]


def test_cond_and_uncond_run_as_one_batch() -> None:
    net = ToyNet(1 / 1000, 4)
    _run(net, SamplingRequest(seed=1, steps=3, cfg=7.0, sampler="euler"))
    assert [b for b, _ in net.calls] == [4, 4, 4]  # 2 latents x (negative, positive), one forward per step


def test_cfg_one_skips_the_negative_prompt() -> None:
    net = ToyNet(1 / 1000, 4)
    a = _run(net, SamplingRequest(seed=1, steps=3, cfg=1.0))
    assert [b for b, _ in net.calls] == [2, 2, 2]
    # and the result is the positive prompt's alone: a different negative changes nothing
    ms, fmt = for_family("sd1"), latent_format_for("sd1")
    pos, _ = toy_conditioning(2)
    other = Conditioning(torch.full((2, 5, 8), 3.0))
    b = sample(
        ToyNet(1 / 1000, 4),
        ms,
        fmt,
        empty_latent(2, 64, 64, fmt),
        pos,
        other,
        SamplingRequest(seed=1, steps=3, cfg=1.0),
    )
    assert torch.equal(a, b)


def test_unequal_prompt_lengths_batch_by_repeating_like_comfyui() -> None:
    ms = for_family("sd1")
    net = ToyNet(1 / 1000, 4)
    den = ModelDenoiser(net, ms)
    x, sigma = torch.randn(1, 4, 8, 8), torch.tensor([3.0])
    short = Conditioning(torch.randn(1, 77, 8))
    long = Conditioning(torch.cat([short.context, short.context], dim=1))  # 154 tokens
    guided = CfgDenoiser(den, long, short, 5.0)
    out = guided(x, sigma)
    assert [b for b, _ in net.calls] == [2]  # one batched pass
    # repeating a prompt's tokens leaves the toy network's output unchanged: cond == uncond
    torch.testing.assert_close(out, den(x, sigma, short))
    too_long = Conditioning(torch.randn(1, 77 * 5, 8))  # lcm / min = 5 > 4: two passes
    CfgDenoiser(den, too_long, short, 5.0)(x, sigma)
    assert [b for b, _ in net.calls] == [2, 1, 1, 1]  # (the third is the reference call above)


def test_positive_of_batch_one_is_repeated_to_the_latent_batch() -> None:
    net = ToyNet(1 / 1000, 4)
    ms, fmt = for_family("sd1"), latent_format_for("sd1")
    pos, neg = toy_conditioning(1)
    out1 = sample(
        net, ms, fmt, empty_latent(3, 64, 64, fmt), pos, neg, SamplingRequest(seed=4, steps=2, cfg=3.0)
    )
    pos3 = Conditioning(pos.context.expand(3, -1, -1).clone())
    neg3 = Conditioning(neg.context.expand(3, -1, -1).clone())
    out3 = sample(
        net, ms, fmt, empty_latent(3, 64, 64, fmt), pos3, neg3, SamplingRequest(seed=4, steps=2, cfg=3.0)
    )
    assert torch.equal(out1, out3)
    with pytest.raises(LoadoutError):
        sample(
            net,
            ms,
            fmt,
            empty_latent(3, 64, 64, fmt),
            toy_conditioning(2)[0],
            None,
            SamplingRequest(seed=4, steps=2),
        )


@pytest.mark.parametrize("sampler", ["euler", "heun", "dpmpp_2m_sde", "uni_pc"])
def test_interrupt_between_steps(sampler: str) -> None:
    stop = threading.Event()
    seen: list[StepProgress] = []

    def check() -> None:
        if stop.is_set():
            raise InterruptedByUser(
                "Stopped by the user", why="the stop button was pressed", fix="start again"
            )

    def progress(p: StepProgress) -> None:
        seen.append(p)
        if p.step == 2:
            stop.set()  # the user presses stop while step 2's preview is shown

    request = SamplingRequest(seed=9, steps=5, cfg=4.0, sampler=sampler, scheduler="karras")
    ms, fmt, net = family_setup("sd1")
    pos, neg = toy_conditioning(2)
    latent = empty_latent(2, 64, 64, fmt)
    with pytest.raises(InterruptedByUser):
        sample(net, ms, fmt, latent, pos, neg, request, check=check, progress=progress)
    assert [p.step for p in seen] == [1, 2]
    assert not latent.any()  # the caller's latent is untouched
    # nothing half-done is kept: the same request gives what an uninterrupted run gives
    again = sample(net, ms, fmt, latent, pos, neg, request)
    fresh = sample(ToyNet(1 / 1000, 4), ms, fmt, empty_latent(2, 64, 64, fmt), pos, neg, request)
    assert torch.equal(again, fresh)


def test_compute_dtype_reaches_the_model_and_state_stays_float32() -> None:
    seen: list[torch.dtype] = []
    net = ToyNet(1 / 1000, 4)

    def model(x: torch.Tensor, t: torch.Tensor, cond: Conditioning, patches: object = None) -> torch.Tensor:
        seen.append(x.dtype)
        assert cond.context.dtype == torch.bfloat16 and t.dtype == torch.float32
        return net(x, t, cond)

    ms, fmt = for_family("sd1"), latent_format_for("sd1")
    pos, neg = toy_conditioning(1)
    out = sample(
        model,
        ms,
        fmt,
        empty_latent(1, 64, 64, fmt),
        pos,
        neg,
        SamplingRequest(seed=2, steps=2, cfg=2.0),
        compute_dtype=torch.bfloat16,
    )
    assert set(seen) == {torch.bfloat16}
    assert out.dtype == torch.float32
    ref = sample(
        ToyNet(1 / 1000, 4),
        ms,
        fmt,
        empty_latent(1, 64, 64, fmt),
        pos,
        neg,
        SamplingRequest(seed=2, steps=2, cfg=2.0),
    )
    # bf16 rounding of the model input only: close on average, not bit-equal
    assert float((out - ref).abs().mean()) < 0.02 * float(ref.abs().mean())
    assert not torch.equal(out, ref)


def test_denoise_zero_returns_the_latent() -> None:
    ms, fmt, net = family_setup("sd1")
    pos, neg = toy_conditioning(1)
    latent = torch.randn(1, 4, 8, 8)
    out = sample(net, ms, fmt, latent, pos, neg, SamplingRequest(seed=2, steps=4, denoise=0.0))
    assert torch.equal(out, latent) and out is not latent
    assert net.calls == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sampler": "euler_a"},
        {"scheduler": "ddim_uniformish"},
        {"steps": 0},
        {"cfg": float("nan")},
        {"denoise": -0.1},
        {"seed": -5},
    ],
)
def test_bad_requests_are_loadout_errors(kwargs: dict[str, object]) -> None:
    base: dict[str, object] = {"seed": 1}
    base.update(kwargs)
    with pytest.raises(LoadoutError) as info:
        SamplingRequest(**base)  # type: ignore[arg-type]
    assert info.value.why and info.value.fix


def test_wrong_latent_channels_are_refused() -> None:
    ms, fmt, net = family_setup("sd3")
    pos, neg = toy_conditioning(1)
    with pytest.raises(LoadoutError) as info:
        sample(net, ms, fmt, torch.zeros(1, 4, 8, 8), pos, neg, SamplingRequest(seed=1, steps=2))
    assert "16" in info.value.message


def test_dpm_adaptive_stops_with_an_error_when_the_model_returns_nan() -> None:
    """Its step-size control never ends on a NaN error estimate (ComfyUI loops forever there)."""
    ms, fmt = for_family("sd1"), latent_format_for("sd1")
    calls: list[int] = []

    def nan_net(x: Tensor, t: Tensor, cond: Conditioning, patches: NetworkPatches = NO_PATCHES) -> Tensor:
        calls.append(1)
        return torch.full_like(x, float("nan"))

    request = SamplingRequest(seed=1, steps=4, cfg=1.0, sampler="dpm_adaptive")
    with pytest.raises(LoadoutError) as info:
        sample(
            nan_net, ms, fmt, empty_latent(1, 64, 64, fmt), Conditioning(torch.zeros(1, 3, 8)), None, request
        )
    assert "not a number" in info.value.message and len(calls) < 10
