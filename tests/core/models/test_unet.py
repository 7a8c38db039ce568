"""The SD UNet against diffusers' UNet2DConditionModel (test-only reference), its original key
layout, config detection from shapes, and the diffusers key map."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
import torch

from core.errors import ModelMismatchError
from core.loading.convert.unet_diffusers import unet_diffusers_to_original, unet_original_key_map
from core.models.attention import timestep_embedding
from core.models.unet import UNetConfig, UNetModel

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: as fast, spins against nothing

diffusers = pytest.importorskip("diffusers")

CTX = 16


SD1_DIFFUSERS: dict[str, Any] = {
    "block_out_channels": (32, 64),
    "layers_per_block": 2,
    "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"),
    "cross_attention_dim": CTX,
    "attention_head_dim": 2,  # diffusers' legacy name: the number of heads
}
SD1_CONFIG = UNetConfig(
    in_channels=4,
    out_channels=4,
    model_channels=32,
    channel_mult=(1, 2),
    num_res_blocks=(2, 2),
    transformer_depth=(1, 1, 0, 0),
    transformer_depth_middle=1,
    transformer_depth_output=(0, 0, 0, 1, 1, 1),
    context_dim=CTX,
    num_heads=2,
    num_head_channels=None,
)

SD2_DIFFUSERS: dict[str, Any] = {
    "block_out_channels": (32, 64, 64),
    "layers_per_block": 2,
    "down_block_types": ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    "cross_attention_dim": CTX,
    "attention_head_dim": (2, 4, 4),  # heads of 16 channels
    "use_linear_projection": True,
}
SD2_CONFIG = UNetConfig.per_level(
    model_channels=32,
    channel_mult=(1, 2, 2),
    num_res_blocks=2,
    level_depth=(1, 1, 0),
    transformer_depth_middle=1,
    context_dim=CTX,
    num_head_channels=16,
    use_linear_in_transformer=True,
)

TIME_DIM = 8
TEXT_DIM = 16
SDXL_DIFFUSERS: dict[str, Any] = {
    "block_out_channels": (32, 64, 128),
    "layers_per_block": 2,
    "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    "up_block_types": ("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
    "cross_attention_dim": CTX,
    "attention_head_dim": (2, 4, 8),
    "transformer_layers_per_block": (1, 1, 2),
    "use_linear_projection": True,
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": TIME_DIM,
    "projection_class_embeddings_input_dim": TEXT_DIM + 6 * TIME_DIM,
}
SDXL_CONFIG = UNetConfig.per_level(
    model_channels=32,
    channel_mult=(1, 2, 4),
    num_res_blocks=2,
    level_depth=(0, 1, 2),
    transformer_depth_middle=2,
    context_dim=CTX,
    num_head_channels=16,
    use_linear_in_transformer=True,
    adm_in_channels=TEXT_DIM + 6 * TIME_DIM,
)

# SSD-1B-like: depths differ between blocks of one level, and the middle is a single ResBlock.
SSD_DIFFUSERS: dict[str, Any] = {
    **SDXL_DIFFUSERS,
    "transformer_layers_per_block": ((1, 1), (1, 2), (2, 1)),
    "reverse_transformer_layers_per_block": ((3, 1, 2), (1, 2, 1), (1, 1, 1)),
    "mid_block_type": "UNetMidBlock2D",
}
SSD_CONFIG = dataclasses.replace(
    SDXL_CONFIG,
    transformer_depth=(0, 0, 1, 2, 2, 1),
    transformer_depth_middle=None,
    transformer_depth_output=(3, 1, 2, 1, 2, 1, 0, 0, 0),
)

CASES = {
    "sd1": (SD1_DIFFUSERS, SD1_CONFIG),
    "sd2": (SD2_DIFFUSERS, SD2_CONFIG),
    "sdxl": (SDXL_DIFFUSERS, SDXL_CONFIG),
    "ssd-1b": (SSD_DIFFUSERS, SSD_CONFIG),
}


def _shapes(sd: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in sd.items()}


def _diffusers_unet(kwargs: Mapping[str, Any], seed: int = 0) -> Any:
    torch.manual_seed(seed)
    model = diffusers.UNet2DConditionModel(sample_size=16, **kwargs).eval()
    with torch.no_grad():  # norms start at 1/0: perturb them so a swapped norm cannot go unseen
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.2 * torch.randn_like(p))
    return model


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("size", [(16, 16), (10, 14)])
def test_matches_diffusers(name: str, size: tuple[int, int]) -> None:
    dcfg, config = CASES[name]
    ref = _diffusers_unet(dcfg)
    model = UNetModel(config).eval()
    model.load_state_dict(unet_diffusers_to_original(ref.state_dict(), config), strict=True)

    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 4, *size, generator=g)
    t = torch.tensor([15.0, 730.0])
    ctx = torch.randn(2, 7, CTX, generator=g)
    kwargs: dict[str, Any] = {}
    y = None
    if config.adm_in_channels is not None:
        text = torch.randn(2, TEXT_DIM, generator=g)
        time_ids = torch.tensor([[1024.0, 1024, 0, 0, 1024, 1024], [832, 1216, 16, 32, 1024, 1024]])
        kwargs["added_cond_kwargs"] = {"text_embeds": text, "time_ids": time_ids}
        y = torch.cat([text, timestep_embedding(time_ids.flatten(), TIME_DIM).reshape(2, -1)], dim=1)
    with torch.no_grad():
        expected = ref(x, t, encoder_hidden_states=ctx, **kwargs).sample
        got = model(x, t, ctx, y)
    err = _rel_err(got, expected)
    print(f"{name} {size}: max rel err {err:.2e}")
    assert got.shape == expected.shape == (2, 4, *size)
    assert expected.std() > 0.1  # a real output, not a degenerate one
    assert err <= 1e-4


def test_parity_check_detects_a_wrong_mapping() -> None:
    """The parity test can fail: the same weights with two ResBlock norms swapped disagree."""
    ref = _diffusers_unet(SD1_DIFFUSERS)
    sd = unet_diffusers_to_original(ref.state_dict(), SD1_CONFIG)
    a, b = "input_blocks.1.0.in_layers.0.weight", "input_blocks.1.0.out_layers.0.weight"
    sd[a], sd[b] = sd[b], sd[a]
    model = UNetModel(SD1_CONFIG).eval()
    model.load_state_dict(sd, strict=True)
    x, t, ctx = torch.randn(1, 4, 16, 16), torch.tensor([500.0]), torch.randn(1, 7, CTX)
    with torch.no_grad():
        assert _rel_err(model(x, t, ctx), ref(x, t, encoder_hidden_states=ctx).sample) > 1e-3


@pytest.mark.parametrize("in_channels", [9, 8])
def test_inpaint_and_ip2p_inputs_run_and_detect(in_channels: int) -> None:
    config = dataclasses.replace(SD1_CONFIG, in_channels=in_channels)
    model = UNetModel(config, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.05)
        out = model(torch.randn(2, in_channels, 16, 16), torch.tensor([1.0, 999.0]), torch.randn(2, 5, CTX))
    assert out.shape == (2, 4, 16, 16)
    assert torch.isfinite(out).all()
    shapes = _shapes(model.state_dict())
    assert shapes["input_blocks.0.0.weight"] == (32, in_channels, 3, 3)
    assert UNetConfig.from_shapes(shapes, num_heads=2) == config


def test_forward_without_y_on_an_adm_model_is_a_clear_error() -> None:
    model = UNetModel(SDXL_CONFIG)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        with pytest.raises(ModelMismatchError, match="'y' vector"):
            model(torch.zeros(1, 4, 8, 8), torch.tensor([1.0]), torch.zeros(1, 3, CTX))


FULL = {
    "sd1": (UNetConfig.sd1(), 686),
    "sd2": (UNetConfig.sd2(), 686),
    "sdxl": (UNetConfig.sdxl(), 1680),
    "sdxl-refiner": (UNetConfig.sdxl_refiner(), None),
    "ssd-1b": (UNetConfig.ssd_1b(), None),
    "segmind-vega": (UNetConfig.segmind_vega(), None),
}


@pytest.mark.parametrize("name", list(FULL))
def test_full_size_on_meta_round_trips_through_from_shapes(name: str) -> None:
    config, tensors = FULL[name]
    model = UNetModel(config, device="meta", dtype=torch.float16)
    sd = model.state_dict()
    assert all(v.device.type == "meta" for v in sd.values())
    if tensors is not None:
        assert len(sd) == tensors
    assert UNetConfig.from_shapes(_shapes(sd)) == config


def test_full_size_key_names_and_parameter_counts() -> None:
    sd15 = _shapes(UNetModel(UNetConfig.sd1(), device="meta").state_dict())
    xl = _shapes(UNetModel(UNetConfig.sdxl(), device="meta").state_dict())
    assert sum(map(_numel, sd15.values())) == 859_520_964
    assert sum(map(_numel, xl.values())) == 2_567_463_684
    assert xl["label_emb.0.0.weight"] == (1280, 2816)
    assert xl["middle_block.1.transformer_blocks.9.attn2.to_k.weight"] == (1280, 2048)
    assert xl["output_blocks.2.2.conv.weight"] == (1280, 1280, 3, 3)
    assert xl["out.2.weight"] == (4, 320, 3, 3)
    assert sd15["input_blocks.1.1.proj_in.weight"] == (320, 320, 1, 1)
    assert sd15["output_blocks.2.1.conv.weight"] == (1280, 1280, 3, 3)
    assert "label_emb.0.0.weight" not in sd15


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def test_ssd_1b_like_irregular_depths_are_read_per_block() -> None:
    sd = _shapes(UNetModel(UNetConfig.ssd_1b(), device="meta").state_dict())
    assert "middle_block.1.proj_in.weight" not in sd and "middle_block.0.in_layers.0.weight" in sd
    assert "output_blocks.2.1.transformer_blocks.9.attn1.to_q.weight" in sd
    assert "output_blocks.2.1.transformer_blocks.10.attn1.to_q.weight" not in sd
    config = UNetConfig.from_shapes(sd)
    assert config.transformer_depth_output == (4, 4, 10, 2, 1, 1, 0, 0, 0)
    assert config.transformer_depth_middle is None


def test_from_shapes_rejects_what_is_not_a_unet() -> None:
    sd = _shapes(UNetModel(SD1_CONFIG, device="meta").state_dict())
    with pytest.raises(ModelMismatchError, match=r"input_blocks\.0\.0\.weight"):
        UNetConfig.from_shapes({k: v for k, v in sd.items() if not k.startswith("input_blocks.0.")})
    with pytest.raises(ModelMismatchError, match="output blocks"):
        UNetConfig.from_shapes({k: v for k, v in sd.items() if not k.startswith("output_blocks.5.")})


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="transformer_depth needs"):
        dataclasses.replace(SD1_CONFIG, transformer_depth=(1, 1, 0))
    with pytest.raises(ValueError, match="exactly one"):
        dataclasses.replace(SD1_CONFIG, num_head_channels=16)


DIFFUSERS_FULL = {
    "sd1": (
        UNetConfig.sd1(),
        {"cross_attention_dim": 768, "attention_head_dim": 8},
    ),
    "sdxl": (
        UNetConfig.sdxl(),
        {
            "block_out_channels": (320, 640, 1280),
            "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
            "up_block_types": ("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
            "cross_attention_dim": 2048,
            "attention_head_dim": (5, 10, 20),
            "transformer_layers_per_block": (1, 2, 10),
            "use_linear_projection": True,
            "addition_embed_type": "text_time",
            "addition_time_embed_dim": 256,
            "projection_class_embeddings_input_dim": 2816,
        },
    ),
}


@pytest.mark.parametrize("name", list(DIFFUSERS_FULL))
def test_key_map_covers_a_full_size_diffusers_unet(name: str) -> None:
    config, kwargs = DIFFUSERS_FULL[name]
    with torch.device("meta"):
        ref = diffusers.UNet2DConditionModel(sample_size=128, **kwargs)
    theirs = _shapes(ref.state_dict())
    ours = _shapes(UNetModel(config, device="meta").state_dict())
    key_map = unet_original_key_map(config)
    assert set(key_map) == set(theirs)
    assert len(set(key_map.values())) == len(key_map)  # one-to-one
    assert set(key_map.values()) == set(ours)
    assert {key_map[k]: s for k, s in theirs.items()} == ours
    assert unet_diffusers_to_original(theirs, config) == ours


def test_converter_lists_unmapped_and_missing_keys() -> None:
    shapes = _shapes(_diffusers_unet(SD1_DIFFUSERS).state_dict())
    shapes["down_blocks.0.attentions.0.bogus.weight"] = (1,)
    del shapes["conv_out.bias"]
    with pytest.raises(ModelMismatchError, match=r"1 unmapped: down_blocks\.0\.attentions\.0\.bogus") as e:
        unet_diffusers_to_original(shapes, SD1_CONFIG)
    assert "conv_out.bias" in str(e.value)


def test_converter_accepts_class_embedding_names() -> None:
    shapes = _shapes(_diffusers_unet(SDXL_DIFFUSERS).state_dict())
    aliased = {k.replace("add_embedding.", "class_embedding."): v for k, v in shapes.items()}
    assert unet_diffusers_to_original(aliased, SDXL_CONFIG) == unet_diffusers_to_original(shapes, SDXL_CONFIG)


def test_every_weight_lives_in_an_ops_layer() -> None:
    from core.ops.layers import CastWeights

    model = UNetModel(SDXL_CONFIG, device="meta")
    owners = {type(m).__name__ for m in model.modules() if list(m.parameters(recurse=False))}
    assert all(isinstance(m, CastWeights) for m in model.modules() if list(m.parameters(recurse=False))), (
        owners
    )


def test_weights_are_cast_to_the_input_dtype_at_forward() -> None:
    ref = _diffusers_unet(SD2_DIFFUSERS)
    sd = unet_diffusers_to_original(ref.state_dict(), SD2_CONFIG)
    fp32 = UNetModel(SD2_CONFIG).eval()
    fp32.load_state_dict(sd)
    stored_half = UNetModel(SD2_CONFIG, dtype=torch.float16).eval()
    stored_half.load_state_dict(sd)
    x, t, ctx = torch.randn(1, 4, 16, 16), torch.tensor([300.0]), torch.randn(1, 7, CTX)
    with torch.no_grad():
        expected = fp32(x, t, ctx)
        in_bf16 = fp32(x.bfloat16(), t, ctx)
        from_half = stored_half(x, t, ctx)
    assert in_bf16.dtype == torch.bfloat16 and from_half.dtype == torch.float32
    assert next(stored_half.parameters()).dtype == torch.float16  # stored weights untouched
    assert _rel_err(in_bf16.float(), expected) < 5e-2
    assert _rel_err(from_half, expected) < 5e-3
