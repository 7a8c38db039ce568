"""Seeds carry over: the initial noise and the samplers' own noise equal ComfyUI's (goldens: see
``toy.py``), and the initial noise is literally ``torch.randn`` from a seeded CPU generator."""

from __future__ import annotations

import pytest
import torch

from core.errors import LoadoutError
from core.sampling import BrownianNoise, GaussianNoise, initial_noise
from tests.core.sampling.toy import assert_matches, load_golden

GOLDEN = load_golden("comfy_noise.json")


@pytest.mark.parametrize("seed", [0, 42, 2**32 + 5, 0xFFFFFFFFFFFFFFFF])
def test_initial_noise_matches_comfyui(seed: int) -> None:
    noise = initial_noise((3, 4, 8, 8), seed)
    assert noise.dtype == torch.float32 and noise.device.type == "cpu"
    assert_matches(noise, GOLDEN[f"prepare-{seed}"], rel=0)
    expected = torch.randn([3, 4, 8, 8], generator=torch.Generator("cpu").manual_seed(seed))
    assert torch.equal(noise, expected)


def test_batch_is_one_draw_of_the_whole_batch() -> None:
    one = initial_noise((1, 4, 8, 8), 42)
    four = initial_noise((4, 4, 8, 8), 42)
    assert torch.equal(four[:1], one)  # the first item is the batch-of-1 noise ...
    assert not torch.equal(four[1:2], one)  # ... the others continue the same stream
    assert torch.equal(four.reshape(-1)[: one.numel()], one.reshape(-1))


def test_batch_index_matches_comfyui() -> None:
    noise = initial_noise((3, 4, 8, 8), 42, batch_index=(2, 0, 2))
    assert_matches(noise, GOLDEN["prepare-batch_index"], rel=0)
    assert torch.equal(noise[0], noise[2])
    with pytest.raises(LoadoutError):
        initial_noise((3, 4, 8, 8), 42, batch_index=(0, 1))


@pytest.mark.parametrize("seed", [-1, 2**64])
def test_out_of_range_seed_is_refused(seed: int) -> None:
    with pytest.raises(LoadoutError) as info:
        initial_noise((1, 4, 8, 8), seed)
    assert info.value.code == "bad_argument"


def test_ancestral_noise_matches_comfyui() -> None:
    noise = GaussianNoise(torch.zeros(2, 4, 8, 8), seed=42)
    one = torch.tensor(1.0)
    for draw in GOLDEN["default-draws"]:
        assert_matches(noise(one, one), draw, rel=0)


def test_brownian_noise_matches_comfyui() -> None:
    facts = GOLDEN["brownian"]
    noise = BrownianNoise(
        torch.zeros(2, 4, 8, 8),
        torch.tensor(facts["sigma_min"]),
        torch.tensor(facts["sigma_max"]),
        facts["seed"],
    )
    for (a, b), draw in zip(facts["pairs"], facts["draws"], strict=True):
        assert_matches(noise(torch.tensor(a), torch.tensor(b)), draw, rel=1e-6)


def test_brownian_noise_is_a_function_of_the_interval_not_of_call_order() -> None:
    def make() -> BrownianNoise:
        return BrownianNoise(torch.zeros(1, 4, 8, 8), torch.tensor(0.03), torch.tensor(14.6), seed=5)

    first, second = make(), make()
    a = first(torch.tensor(7.0), torch.tensor(3.0))
    first(torch.tensor(14.6), torch.tensor(10.0))
    second(torch.tensor(1.0), torch.tensor(0.5))
    assert torch.equal(second(torch.tensor(7.0), torch.tensor(3.0)), a)
    # increments are normalised: unit variance whatever the interval's length
    assert 0.7 < float(first(torch.tensor(0.04), torch.tensor(0.05)).std()) < 1.3
