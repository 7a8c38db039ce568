"""Qwen-Image-Edit's prompt encoding as ComfyUI's ``TextEncodeQwenImageEditPlus`` does it, against
transformers' ``Qwen2_5_VLModel`` on the same tokens and pixels: the edit template, one "Picture N:"
prefix per picture, each ``<|image_pad|>`` standing for the vision tower's tokens of its picture,
Qwen2.5-VL's 3D positions, the template's system part (64 tokens) dropped. The vision tower at its
released width (1280, 16 heads; two blocks, one windowed, one full), the language model narrow with
the real vocabulary and head width (M-RoPE sections 16/24/24), random weights, fp32."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLModel

from core.archs.llm.towers import (
    QWEN_IMAGE_EDIT_2508_QWEN25VL,
    QWEN_IMAGE_EDIT_QWEN25VL,
    QWEN_IMAGE_QWEN25VL,
    QWEN_IMAGE_TEMPLATE,
)
from core.errors import LoadoutError, ModelMismatchError
from core.models.llm import LlmConfig, LlmTextModel
from core.models.llm.vision import VisionConfig, picture_patches
from core.text.llm import LlmTower, qwen_tokenizer
from core.text.llm.pictures import scaled

pytestmark = pytest.mark.usefixtures("one_thread")

WIDTH = 256
SYSTEM = (
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, "
    "objects, background), then explain how the user's text instruction should alter or modify the image. "
    "Generate a new image that meets the user's requirements while maintaining consistency with the "
    "original input where appropriate.<|im_end|>\n<|im_start|>user\n"
)
END = "<|im_end|>\n<|im_start|>assistant\n"


def _hf() -> Qwen2_5_VLModel:
    cfg = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=152064, hidden_size=WIDTH, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, rms_norm_eps=1e-6, max_position_embeddings=40960,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
        ),
        vision_config=dict(
            depth=2, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=WIDTH,
            fullatt_block_indexes=[1], window_size=112,
        ),
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    cfg.text_config._attn_implementation = "sdpa"
    cfg.vision_config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = Qwen2_5_VLModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_((0.0 if name.endswith("bias") else 1.0) + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * p[0].numel() ** -0.5)
    return model


@pytest.fixture(scope="module")
def pair() -> tuple[Qwen2_5_VLModel, LlmTower]:
    hf = _hf()
    cfg = dataclasses.replace(
        LlmConfig.preset("qwen2.5-vl-7b"), hidden_size=WIDTH, intermediate_size=96, num_layers=2, num_heads=2,
        num_kv_heads=1, vision=VisionConfig(depth=2, out_hidden_size=WIDTH, full_attention=(1,)),
    )  # fmt: skip
    ours = LlmTextModel(cfg)
    state = {}
    for k, v in hf.state_dict().items():
        if "rotary" in k:
            continue
        state[
            "visual." + k[7:] if k.startswith("visual.") else "model." + k.removeprefix("language_model.")
        ] = v
    ours.load_state_dict(state, strict=True)
    return hf, LlmTower(ours.eval(), qwen_tokenizer(), QWEN_IMAGE_EDIT_QWEN25VL)


def _pictures() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return [torch.rand(3, 384, 384, generator=g), torch.rand(3, 256, 512, generator=g)]


def test_the_edit_prompt_equals_transformers_on_the_same_tokens_and_pixels(
    pair: tuple[Qwen2_5_VLModel, LlmTower],
) -> None:
    hf, tower = pair
    prompt = "Put the cat of picture 1 on the sofa of picture 2"
    pictures = _pictures()
    vision = VisionConfig()
    patches, grids, text = [], [], SYSTEM
    for i, picture in enumerate(pictures):
        p, grid = picture_patches(scaled(picture, 384 * 384), vision)
        patches.append(p)
        grids.append(grid)
        text += (
            f"Picture {i + 1}: <|vision_start|>"
            + "<|image_pad|>" * (grid[1] * grid[2] // 4)
            + "<|vision_end|>"
        )
    assert grids == [(1, 28, 28), (1, 20, 38)]  # 384^2 -> 392^2; 256 x 512 -> 272 x 543 -> 280 x 532
    ids = qwen_tokenizer().encode(text + prompt + END)
    assert len(qwen_tokenizer().encode(SYSTEM)) == 64  # ComfyUI's rule drops these (diffusers' drop_idx 64)
    with torch.no_grad():
        ids_t = torch.tensor([ids])
        ref = hf(
            input_ids=ids_t, pixel_values=torch.cat(patches), image_grid_thw=torch.tensor(grids),
            mm_token_type_ids=(ids_t == 151655).int(),  # the processor's: which tokens are a picture's
        ).last_hidden_state[:, 64:]  # fmt: skip
    out = tower.encode(prompt, pictures)
    assert out.hidden.shape == ref.shape == (1, len(ids) - 64, WIDTH)
    err = float((out.hidden - ref).abs().max() / ref.abs().max())
    assert err < 1e-4, err
    assert torch.equal(out.mask, torch.ones(1, len(ids) - 64, dtype=torch.long))
    # the pictures are read: other pixels give other hidden states, the text's too
    other = tower.encode(prompt, [pictures[1], pictures[0]])
    assert other.hidden.shape != out.hidden.shape or not torch.allclose(other.hidden, out.hidden, atol=1e-3)


def test_without_pictures_the_edit_template_is_read_and_too_many_are_refused(
    pair: tuple[Qwen2_5_VLModel, LlmTower],
) -> None:
    hf, tower = pair
    ids = qwen_tokenizer().encode(SYSTEM + "a red bicycle" + END)
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor([ids])).last_hidden_state[:, 64:]
    out = tower.encode("a red bicycle")
    torch.testing.assert_close(out.hidden, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(LoadoutError, match="takes 3 reference pictures, 4 were given"):
        tower.encode("x", [torch.rand(3, 64, 64)] * 4)
    text_only = LlmTower(tower.model, tower.tokenizer, QWEN_IMAGE_QWEN25VL)
    with pytest.raises(LoadoutError, match="takes 0 reference pictures"):
        text_only.encode("x", [torch.rand(3, 64, 64)])


def test_a_file_without_the_vision_tower_says_so() -> None:
    cfg = dataclasses.replace(
        LlmConfig.preset("qwen2.5-vl-7b"), vocab_size=152064, hidden_size=WIDTH, intermediate_size=96,
        num_layers=1, num_heads=2, num_kv_heads=1,
    )  # fmt: skip
    tower = LlmTower(LlmTextModel(cfg, device="meta"), qwen_tokenizer(), QWEN_IMAGE_EDIT_QWEN25VL)
    with pytest.raises(ModelMismatchError, match="no vision tower"):
        tower.encode("x", [torch.rand(3, 64, 64)])


def test_the_original_edit_prompt_follows_text_encode_qwen_image_edit(
    pair: tuple[Qwen2_5_VLModel, LlmTower],
) -> None:
    """The original Qwen-Image-Edit (ComfyUI's ``TextEncodeQwenImageEdit``, the tokenizer's
    ``llama_template_images``; diffusers' ``QwenImageEditPipeline`` has the same template): one
    picture, its tokens right after ``user\\n`` with no "Picture 1:", scaled to 1024 x 1024 px of area
    (here a smaller area on a small picture: the vision tower's cost), 64 tokens dropped; without a
    picture Qwen-Image's own template, 34 dropped; two pictures refused."""
    hf, tower = pair
    spec = QWEN_IMAGE_EDIT_2508_QWEN25VL
    assert spec.pictures is not None and (spec.pictures.area, spec.pictures.most) == (1024 * 1024, 1)
    small = dataclasses.replace(spec, pictures=dataclasses.replace(spec.pictures, area=112 * 112))
    original = LlmTower(tower.model, tower.tokenizer, small)
    picture = torch.rand(3, 96, 64, generator=torch.Generator().manual_seed(8))
    patches, grid = picture_patches(scaled(picture, 112 * 112), VisionConfig())
    pads = "<|image_pad|>" * (grid[1] * grid[2] // 4)
    ids = qwen_tokenizer().encode(SYSTEM + f"<|vision_start|>{pads}<|vision_end|>" + "make it night" + END)
    with torch.no_grad():
        ids_t = torch.tensor([ids])
        ref = hf(
            input_ids=ids_t, pixel_values=patches, image_grid_thw=torch.tensor([grid]),
            mm_token_type_ids=(ids_t == 151655).int(),
        ).last_hidden_state[:, 64:]  # fmt: skip
    out = original.encode("make it night", [picture])
    assert out.hidden.shape == ref.shape
    assert float((out.hidden - ref).abs().max() / ref.abs().max()) < 1e-4
    plus = tower.encode("make it night", [picture])  # 2509's: "Picture 1:" and 384^2 of area
    assert plus.hidden.shape != out.hidden.shape or not torch.allclose(plus.hidden, out.hidden, atol=1e-3)
    bare = qwen_tokenizer().encode(QWEN_IMAGE_TEMPLATE.format("a red bicycle"))
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor([bare])).last_hidden_state[:, 34:]
    torch.testing.assert_close(original.encode("a red bicycle").hidden, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(LoadoutError, match="takes 1 reference pictures, 2 were given"):
        original.encode("x", [picture, picture])
