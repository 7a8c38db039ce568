"""The records the protocols pass around: a text mask batches with its context, a latent format
with a mean and std per channel round-trips (Wan's and Qwen-Image's kind), a load generation is
never reused (the conditioning and preview caches' key)."""

from __future__ import annotations

import pytest
import torch

from core.archs.conditioning import Conditioning
from core.detect.spec import SD3_LATENT, LatentFormat
from core.errors import LoadoutError
from core.sampling.conditioning import can_concat, concat
from core.session import Session


def test_a_text_mask_repeats_and_concatenates_with_its_context() -> None:
    a = Conditioning(torch.zeros(1, 2, 4), mask=torch.tensor([[1, 0]]))
    b = Conditioning(torch.ones(1, 4, 4), mask=torch.tensor([[1, 1, 1, 0]]))
    assert can_concat(a, b) and not can_concat(a, Conditioning(torch.ones(1, 4, 4)))
    both = concat([a, b])
    assert both.context.shape == (2, 4, 4)
    assert both.mask is not None and both.mask.tolist() == [[1, 0, 1, 0], [1, 1, 1, 0]]
    assert a.repeat_to(3).mask is not None and a.repeat_to(3).mask.shape == (3, 2)
    moved = a.to(torch.device("cpu"), torch.float16)
    assert moved.context.dtype == torch.float16 and moved.mask is not None and moved.mask.dtype == torch.int64
    with pytest.raises(LoadoutError, match="mask"):
        Conditioning(torch.zeros(1, 2, 4), mask=torch.ones(1, 3))


def test_a_per_channel_latent_format_round_trips_on_4d_and_5d_latents() -> None:
    mean, std = (0.1, -0.2, 0.3), (0.5, 1.5, 2.0)
    fmt = LatentFormat("test-3ch", 3, 1.0, mean=mean, std=std, frames=True)
    for shape in ((2, 3, 4, 4), (1, 3, 2, 4, 4)):
        z = torch.randn(shape, generator=torch.Generator().manual_seed(0))
        inside = fmt.process_in(z)
        expected = (z[:, 1] - mean[1]) / std[1]
        torch.testing.assert_close(inside[:, 1], expected)
        torch.testing.assert_close(fmt.process_out(inside), z)
    z = torch.randn(1, 16, 2, 2)
    torch.testing.assert_close(SD3_LATENT.process_in(z), (z - SD3_LATENT.shift) * SD3_LATENT.scale)
    with pytest.raises(ValueError, match="3 mean values for 4 channels"):
        LatentFormat("bad", 4, 1.0, mean=mean, std=(*std, 1.0))


def test_load_generations_are_never_reused() -> None:
    session = Session()
    seen = [session.next_generation() for _ in range(5)]
    assert seen == sorted(set(seen)) and seen[0] >= 1
    assert Session().next_generation() == 1  # per session, no module-level counter


def test_reference_latents_batch_with_their_conditioning() -> None:
    ref = torch.randn(1, 16, 2, 3)
    a = Conditioning(torch.zeros(1, 2, 4), references=(ref,))
    assert a.repeat_to(3).references[0].shape == (3, 16, 2, 3)
    assert a.to(torch.device("cpu"), torch.float16).references[0].dtype == torch.float16
    b = Conditioning(torch.ones(1, 4, 4), references=(ref * 2,))
    assert can_concat(a, b)
    both = concat([a, b])
    assert len(both.references) == 1 and torch.equal(both.references[0], torch.cat([ref, ref * 2]))
    # a negative without the reference (or with another size) runs as its own forward pass
    assert not can_concat(a, Conditioning(torch.ones(1, 4, 4)))
    assert not can_concat(a, Conditioning(torch.ones(1, 4, 4), references=(torch.randn(1, 16, 4, 4),)))
    with pytest.raises(LoadoutError, match="reference picture"):
        Conditioning(torch.zeros(1, 2, 4), references=(torch.randn(2, 16, 2, 2),))


def test_a_network_that_takes_no_references_refuses_them_in_words() -> None:
    from core.models.unet import UNetConfig, UNetModel
    from core.sampling.network import NetworkAdapter

    config = UNetConfig(
        in_channels=4, out_channels=4, model_channels=32, channel_mult=(1,), num_res_blocks=(1,),
        transformer_depth=(1,), transformer_depth_middle=1, transformer_depth_output=(0, 1),
        context_dim=8, num_heads=2, num_head_channels=None,
    )
    adapter = NetworkAdapter(UNetModel(config).eval())
    cond = Conditioning(torch.zeros(1, 2, 8), references=(torch.zeros(1, 4, 4, 4),))
    with pytest.raises(LoadoutError, match="takes no reference pictures"):
        adapter(torch.zeros(1, 4, 4, 4), torch.tensor([999.0]), cond)
