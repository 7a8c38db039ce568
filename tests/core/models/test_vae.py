"""KL autoencoder: numerics against diffusers, tiled encode/decode, full-size shapes, key conversion."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from core.errors import ModelMismatchError
from core.loading.convert.vae_diffusers import vae_diffusers_to_original, vae_original_key_map
from core.models.vae import (
    FLUX_LATENT,
    SD1_LATENT,
    SD3_LATENT,
    SDXL_LATENT,
    AutoencoderKL,
    VAEConfig,
    latent_format_for,
    tiled_map,
)

diffusers = pytest.importorskip("diffusers")

TINY = {"base_channels": 16, "channel_mult": (1, 2, 2), "num_res_blocks": 1, "norm_groups": 8}


def tiny_config(latent_channels: int) -> VAEConfig:
    if latent_channels == 4:
        return VAEConfig(latent_channels=4, use_quant_conv=True, **TINY).with_latent_format(SD1_LATENT)
    return VAEConfig(latent_channels=16, use_quant_conv=False, **TINY).with_latent_format(FLUX_LATENT)


def diffusers_kwargs(cfg: VAEConfig) -> dict[str, object]:
    n = len(cfg.channel_mult)
    return {
        "block_out_channels": cfg.level_channels,
        "down_block_types": ("DownEncoderBlock2D",) * n,
        "up_block_types": ("UpDecoderBlock2D",) * n,
        "layers_per_block": cfg.num_res_blocks,
        "latent_channels": cfg.latent_channels,
        "norm_num_groups": cfg.norm_groups,
        "use_quant_conv": cfg.use_quant_conv,
        "use_post_quant_conv": cfg.use_quant_conv,
        "scaling_factor": cfg.scaling_factor,
        "shift_factor": cfg.shift_factor,
    }


def rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float((ours - ref).abs().max() / ref.abs().max())


@pytest.fixture(params=[4, 16], ids=["4ch-quant", "16ch-noquant"])
def pair(request: pytest.FixtureRequest) -> tuple[VAEConfig, nn.Module, AutoencoderKL]:
    cfg = tiny_config(request.param)
    torch.manual_seed(0)
    ref = diffusers.AutoencoderKL(**diffusers_kwargs(cfg)).eval()
    with torch.no_grad():  # move norms and biases off their trivial init so every parameter matters
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ours = AutoencoderKL(cfg).eval()
    ours.load_state_dict(vae_diffusers_to_original(ref.state_dict(), cfg), strict=True)
    return cfg, ref, ours


@torch.no_grad()
def test_encode_matches_diffusers(pair: tuple[VAEConfig, nn.Module, AutoencoderKL]) -> None:
    cfg, ref, ours = pair
    x = torch.rand(2, 3, 32, 40, generator=torch.Generator().manual_seed(1)) * 2 - 1
    mean = ref.encode(x).latent_dist.mean
    expected = (mean - cfg.shift_factor) * cfg.scaling_factor
    got = ours.encode(x)
    assert got.shape == (2, cfg.latent_channels, 8, 10)
    assert rel_err(got, expected) <= 1e-4  # measured ~5e-7


@torch.no_grad()
def test_decode_matches_diffusers(pair: tuple[VAEConfig, nn.Module, AutoencoderKL]) -> None:
    cfg, ref, ours = pair
    latent = torch.randn(2, cfg.latent_channels, 8, 10, generator=torch.Generator().manual_seed(2))
    expected = ref.decode(latent / cfg.scaling_factor + cfg.shift_factor).sample
    got = ours.decode(latent)
    assert got.shape == (2, 3, 32, 40)
    assert rel_err(got, expected) <= 1e-4  # measured ~9e-7


@torch.no_grad()
def test_sampled_encode_uses_the_generator(pair: tuple[VAEConfig, nn.Module, AutoencoderKL]) -> None:
    cfg, _, ours = pair
    x = torch.rand(1, 3, 16, 16) * 2 - 1
    mean, logvar = ours.moments(x).chunk(2, dim=1)
    noise = torch.randn(mean.shape, generator=torch.Generator().manual_seed(7))
    expected = ((mean + torch.exp(0.5 * logvar) * noise) - cfg.shift_factor) * cfg.scaling_factor
    got = ours.encode(x, sample=True, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(got, ours.encode(x))


def _count_decoder_inputs(model: AutoencoderKL) -> tuple[list[tuple[int, ...]], Callable[[], None]]:
    shapes: list[tuple[int, ...]] = []
    handle = model.decoder.register_forward_pre_hook(lambda _m, args: shapes.append(tuple(args[0].shape)))
    return shapes, handle.remove


def _seam_score(img: torch.Tensor, ref: torch.Tensor) -> float:
    """How much the error field jumps at its worst column, against its median column: a seam is a
    column where the error changes abruptly."""
    err = img - ref
    jump = (err[..., 1:] - err[..., :-1]).abs().mean(dim=(0, 1, 2))
    return float(jump.max() / jump.median())


@torch.no_grad()
def test_tiled_decode_matches_untiled(pair: tuple[VAEConfig, nn.Module, AutoencoderKL]) -> None:
    cfg, _, ours = pair
    latent = torch.randn(1, cfg.latent_channels, 48, 48, generator=torch.Generator().manual_seed(3))
    full = ours.decode(latent)
    shapes, remove = _count_decoder_inputs(ours)
    done: list[tuple[int, int]] = []
    tiled = ours.decode_tiled(latent, tile=24, overlap=8, progress=lambda d, t: done.append((d, t)))
    remove()
    assert done[-1] == (9, 9) and len(shapes) == 9  # starts 0, 16, 24 on each axis
    assert all(s[2] <= 24 and s[3] <= 24 for s in shapes)  # the decoder never saw more than one tile
    assert tiled.shape == full.shape and tiled.dtype == full.dtype
    err = (tiled - full).abs()
    # Each tile normalises (GroupNorm) and attends over itself only, so no tiled VAE decode is exact,
    # in tile interiors either. Measured on these random weights (worse than a trained VAE's):
    # mean |err| 3.9% (4ch) / 4.3% (16ch) of the output's std, max |err| 8.3% / 7.9% of its max |value|.
    assert float(err.mean()) <= 0.08 * float(full.std())
    assert float(err.max()) <= 0.15 * float(full.abs().max())
    # The feathered blend leaves no seam (score 1.35 / 1.40); butted tiles do (12.1 / 10.6) and err
    # 2.7x more on average.
    butted = ours.decode_tiled(latent, tile=24, overlap=0)
    assert _seam_score(tiled, full) <= 2.0
    assert _seam_score(butted, full) >= 5.0
    assert float((butted - full).abs().mean()) >= 2 * float(err.mean())


@torch.no_grad()
def test_tiled_encode_matches_untiled(pair: tuple[VAEConfig, nn.Module, AutoencoderKL]) -> None:
    cfg, _, ours = pair
    x = torch.rand(1, 3, 192, 192, generator=torch.Generator().manual_seed(4)) * 2 - 1
    full = ours.encode(x)
    done: list[int] = []
    tiled = ours.encode_tiled(x, tile=96, overlap=32, progress=lambda d, t: done.append(t))
    assert done == [9] * 9
    assert tiled.shape == full.shape == (1, cfg.latent_channels, 48, 48)
    err = (tiled - full).abs()
    # Measured: mean |err| 4.2% (4ch) / 5.3% (16ch) of the latent's std, max 7.7% / 8.6% of its max.
    assert float(err.mean()) <= 0.08 * float(full.std())
    assert float(err.max()) <= 0.15 * float(full.abs().max())


def _local_op(up: int, down: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """A small conv net with no global context (receptive radius 1 + up input pixels)."""
    gen = torch.Generator().manual_seed(5)
    w1, w2 = torch.randn(6, 3, 3, 3, generator=gen), torch.randn(2, 6, 3, 3, generator=gen)

    def fn(t: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(F.conv2d(t, w1, padding=1))
        h = F.interpolate(h, scale_factor=up, mode="nearest") if up > 1 else F.avg_pool2d(h, down)
        return F.conv2d(h, w2, padding=1)

    return fn


@pytest.mark.parametrize(("up", "down", "size", "tile", "overlap"), [(8, 1, 40, 16, 6), (1, 8, 256, 128, 64)])
def test_tiled_map_is_exact_for_local_operators(
    up: int, down: int, size: int, tile: int, overlap: int
) -> None:
    """Blending only averages correct values when each tile is right away from its cut edges: the
    outer quarter of every overlap gets no weight, so interiors and seams agree to rounding."""
    x = torch.randn(2, 3, size, size + 8 * down, generator=torch.Generator().manual_seed(6))
    fn = _local_op(up, down)
    done: list[int] = []
    got = tiled_map(x, fn, tile=tile, overlap=overlap, up=up, down=down, progress=lambda d, t: done.append(d))
    assert len(done) >= 4
    torch.testing.assert_close(got, fn(x), atol=1e-5, rtol=1e-5)


def test_tiled_map_rejects_bad_tiles() -> None:
    x = torch.zeros(1, 3, 32, 32)
    with pytest.raises(ValueError, match="overlap < tile"):
        tiled_map(x, lambda t: t, tile=16, overlap=16)
    with pytest.raises(ValueError, match="multiple of 8"):
        tiled_map(torch.zeros(1, 3, 36, 32), lambda t: t, tile=16, overlap=8, down=8)


def test_latent_factors() -> None:
    assert VAEConfig.sd().scaling_factor == 0.18215 and VAEConfig.sd().shift_factor == 0.0
    assert VAEConfig.sd("sd2") == VAEConfig.sd()
    assert VAEConfig.sd("sdxl").scaling_factor == 0.13025
    assert (VAEConfig.flux().scaling_factor, VAEConfig.flux().shift_factor) == (0.3611, 0.1159)
    assert (VAEConfig.sd3().scaling_factor, VAEConfig.sd3().shift_factor) == (1.5305, 0.0609)
    assert latent_format_for("flux-schnell") is FLUX_LATENT and latent_format_for("ssd-1b") is SDXL_LATENT
    with pytest.raises(ModelMismatchError):
        latent_format_for("wan2.1")
    with pytest.raises(ModelMismatchError, match="16 channels"):
        VAEConfig.sd("flux-dev")


def _meta_shapes(cfg: VAEConfig) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in AutoencoderKL(cfg, device="meta").state_dict().items()}


@pytest.mark.parametrize(
    ("cfg", "fmt", "tensors", "z"),
    [
        (VAEConfig.sd(), SD1_LATENT, 248, 4),
        (VAEConfig.sd("sdxl"), SDXL_LATENT, 248, 4),
        (VAEConfig.flux(), FLUX_LATENT, 244, 16),
        (VAEConfig.sd3(), SD3_LATENT, 244, 16),
    ],
    ids=["sd1", "sdxl", "flux", "sd3"],
)
def test_full_size_on_meta(cfg: VAEConfig, fmt: object, tensors: int, z: int) -> None:
    model = AutoencoderKL(cfg, device="meta")
    assert all(p.is_meta for p in model.parameters())
    shapes = _meta_shapes(cfg)
    assert len(shapes) == tensors  # as in sd-vae-ft-mse / sdxl_vae (248) and Flux ae (244)
    assert shapes["encoder.conv_in.weight"] == (128, 3, 3, 3)
    assert shapes["encoder.conv_out.weight"] == (2 * z, 512, 3, 3)
    assert shapes["decoder.conv_in.weight"] == (512, z, 3, 3)
    assert shapes["encoder.mid.attn_1.q.weight"] == (512, 512, 1, 1)
    assert shapes["decoder.up.1.block.0.nin_shortcut.weight"] == (256, 512, 1, 1)
    assert shapes["encoder.down.2.downsample.conv.weight"] == (512, 512, 3, 3)
    assert "encoder.down.3.downsample.conv.weight" not in shapes
    assert shapes["decoder.up.3.upsample.conv.weight"] == (512, 512, 3, 3)
    assert "decoder.up.0.upsample.conv.weight" not in shapes
    assert ("quant_conv.weight" in shapes) == ("post_quant_conv.weight" in shapes) == (z == 4)
    assert VAEConfig.from_shapes(shapes, latent_format=fmt) == cfg  # type: ignore[arg-type]


def test_from_shapes_defaults_and_errors() -> None:
    assert VAEConfig.from_shapes(_meta_shapes(VAEConfig.sd("sdxl"))) == VAEConfig.sd()  # shapes can't tell
    assert VAEConfig.from_shapes(_meta_shapes(VAEConfig.sd3())) == VAEConfig.flux()
    tiny = tiny_config(4)
    assert VAEConfig.from_shapes(_meta_shapes(tiny), norm_groups=8) == tiny
    with pytest.raises(ModelMismatchError, match=r"decoder\.conv_in\.weight"):
        VAEConfig.from_shapes({"encoder.conv_in.weight": (128, 3, 3, 3)})


@pytest.mark.parametrize("cfg", [VAEConfig.sd(), VAEConfig.flux()], ids=["sd", "flux"])
def test_key_map_covers_full_size_diffusers(cfg: VAEConfig) -> None:
    with torch.device("meta"):
        ref = diffusers.AutoencoderKL(**diffusers_kwargs(cfg))
    ref_shapes = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
    ours = _meta_shapes(cfg)
    key_map = vae_original_key_map(cfg)
    assert set(key_map) == set(ref_shapes)
    assert sorted(key_map.values()) == sorted(ours)  # one-to-one onto our keys
    converted = vae_diffusers_to_original(ref.state_dict(), cfg)
    assert {k: tuple(v.shape) for k, v in converted.items()} == ours


def test_conversion_accepts_legacy_attention_names() -> None:
    cfg = tiny_config(4)
    sd = {k: torch.zeros(1) for k in vae_original_key_map(cfg)}
    legacy = {
        k.replace(".to_q.", ".query.").replace(".to_out.0.", ".proj_attn."): v
        for k, v in sd.items()
        if ".to_q." in k or ".to_out.0." in k
    }
    assert len(legacy) == 8
    modern = {k: v for k, v in sd.items() if ".to_q." not in k and ".to_out.0." not in k}
    converted = vae_diffusers_to_original({**modern, **legacy}, cfg)
    assert set(converted) == set(vae_original_key_map(cfg).values())
    w = torch.randn(32, 32)
    sd["encoder.mid_block.attentions.0.to_k.weight"] = w
    out = vae_diffusers_to_original(sd, cfg)["encoder.mid.attn_1.k.weight"]
    assert out.shape == (32, 32, 1, 1) and out.data_ptr() == w.data_ptr()  # reshaped as a view


def test_conversion_reports_unmapped_and_missing_keys() -> None:
    cfg = tiny_config(4)
    sd = {k: torch.zeros(1) for k in vae_original_key_map(cfg)}
    del sd["decoder.conv_out.bias"]
    sd["decoder.up_blocks.9.resnets.0.conv1.weight"] = torch.zeros(1)
    with pytest.raises(ModelMismatchError) as info:
        vae_diffusers_to_original(sd, cfg)
    message = str(info.value)
    assert "1 unmapped: decoder.up_blocks.9.resnets.0.conv1.weight" in message
    assert "1 missing: decoder.conv_out.bias" in message
    # A 16-channel file without quant convs does not fit a config that expects them.
    with pytest.raises(ModelMismatchError, match=r"missing: post_quant_conv\.bias"):
        vae_diffusers_to_original({k: torch.zeros(1) for k in vae_original_key_map(tiny_config(16))}, cfg)
