"""Qwen2.5-VL's vision tower against transformers' ``Qwen2_5_VisionTransformerPretrainedModel`` at
the released width (1280, 16 heads, merger to 3584) with two blocks (one windowed, one full) and
random weights, fp32; the picture's patches against transformers' image processor, and ComfyUI's
sizes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

from core.errors import LoadoutError
from core.loading.loader import load_text_encoder
from core.models.llm.vision import QwenVisionTower, VisionConfig, picture_patches, picture_size
from tests.fixtures.llm_files import random_state, small_config, write_comfy

pytestmark = pytest.mark.usefixtures("one_thread")


def _reference(depth: int = 2, full: tuple[int, ...] = (1,)) -> Qwen2_5_VisionTransformerPretrainedModel:
    cfg = Qwen2_5_VLVisionConfig(
        depth=depth, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584,
        fullatt_block_indexes=list(full), window_size=112,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2_5_VisionTransformerPretrainedModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():  # random, with norms and biases far from 1 / 0
            p.copy_(
                torch.randn_like(p) * (0.2 if "norm" in name or "ln_q" in name else 0.03)
                + ("norm" in name or "ln_q" in name)
            )
    return model


def test_the_tower_equals_transformers_at_the_released_width() -> None:
    ref = _reference()
    state = {k: v for k, v in ref.state_dict().items() if "rotary" not in k}
    cfg = VisionConfig.from_shapes({f"visual.{k}": tuple(v.shape) for k, v in state.items()})
    assert cfg is not None and (cfg.hidden_size, cfg.num_heads, cfg.depth, cfg.out_hidden_size) == (
        1280,
        16,
        2,
        3584,
    )
    ours = QwenVisionTower(VisionConfig(depth=2, full_attention=(1,)))
    ours.load_state_dict(state)
    # 168 x 224 px: 12 x 16 patches, 6 x 8 merged tokens, windows of 4 x 4 (two cut short)
    picture = torch.rand(3, 168, 224, generator=torch.Generator().manual_seed(1))
    patches, grid = picture_patches(picture, ours.config)
    assert grid == (1, 12, 16) and patches.shape == (192, 1176)
    with torch.no_grad():
        want = ref(patches, torch.tensor([grid])).pooler_output
        got = ours(patches, grid)
    assert got.shape == (48, 3584)
    err = (got - want).abs().max() / want.abs().max()
    assert err < 1e-4, err
    # the windows matter: the same blocks all full-attention give another output
    with torch.no_grad():
        everywhere = QwenVisionTower(VisionConfig(depth=2, full_attention=(0, 1)))
        everywhere.load_state_dict(state)
        assert not torch.allclose(everywhere(patches, grid), want, rtol=1e-3, atol=1e-3)


def test_patches_are_laid_out_as_transformers_processor_lays_them() -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil as Qwen2VLImageProcessor,
    )

    pixels = torch.randint(0, 256, (3, 56, 84), generator=torch.Generator().manual_seed(2), dtype=torch.uint8)
    out = Qwen2VLImageProcessor(do_resize=False).preprocess(
        pixels.permute(1, 2, 0).numpy(), return_tensors="pt"
    )
    patches, grid = picture_patches(pixels.float() / 255, VisionConfig())
    assert list(out["image_grid_thw"][0]) == list(grid) == [1, 4, 6]
    torch.testing.assert_close(patches, out["pixel_values"].float(), rtol=1e-5, atol=1e-5)


def test_pictures_are_sized_as_comfyui_sizes_them() -> None:
    cfg = VisionConfig()
    assert picture_size(384, 384, cfg) == (392, 392)  # TextEncodeQwenImageEditPlus' 384^2 area
    assert picture_size(333, 591, cfg) == (336, 588)  # each side to whole 28 px tokens
    assert picture_size(20, 30, cfg) == (56, 84)  # under 3136 px: scaled up in whole tokens
    assert picture_size(4000, 4000, cfg) == (3584, 3584)  # over 12845056 px: scaled down
    with pytest.raises(LoadoutError, match="RGB picture"):
        picture_patches(torch.rand(4, 28, 28), cfg)


@pytest.mark.parametrize("visual, base", [("visual.", "model."), ("model.visual.", "model.language_model.")])
def test_a_qwen25_vl_file_loads_its_vision_tower_with_the_language_model(
    tmp_path: Path, visual: str, base: str
) -> None:
    """Comfy-Org's (and the original Hugging Face) layout and transformers 4.50+'s: the tower is the
    module's ``visual`` part, its config read from the file's shapes."""
    llm = small_config("qwen2.5-vl-7b", layers=1)
    vision = VisionConfig(
        hidden_size=160, num_heads=2, intermediate_size=64, depth=2, out_hidden_size=llm.hidden_size
    )
    state = random_state(dataclasses.replace(llm, vision=vision), seed=4)
    text = {k: v for k, v in state.items() if k.startswith("model.")}
    tower = {
        visual + k.removeprefix("visual."): v.to(torch.bfloat16)
        for k, v in state.items()
        if k.startswith("visual.")
    }
    path = write_comfy(tmp_path / "qwen_2.5_vl_7b.safetensors", text, base=base, extra=tower)
    loaded = load_text_encoder(path)
    assert loaded.family == "qwen2.5-vl-7b" and loaded.config.vision == vision
    got = {k: v for k, v in loaded.module.state_dict().items() if k.startswith("visual.")}
    assert set(got) == {k for k in state if k.startswith("visual.")}
    assert all(torch.equal(got[k].float(), state[k].to(torch.bfloat16).float()) for k in got)
