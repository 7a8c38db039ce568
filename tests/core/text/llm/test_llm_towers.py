"""Z-Image's and Lumina 2's prompt encoding as ComfyUI does it, against transformers' models:
the template, the layer (-2), the mask and, for Lumina 2, prompt weights against the empty prompt."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from core.models.llm import LlmConfig
from core.text.llm import LUMINA2_GEMMA2, Z_IMAGE_QWEN3, LlmTower, SpmTokenizer, qwen_tokenizer, row_mask
from tests.core.models.llm.reference import hf_config, hf_model, ours_from
from tests.core.text.llm.spm_model import gemma_like_spm

pytestmark = pytest.mark.usefixtures("one_thread")


def _tiny(family: str, vocab: int) -> LlmConfig:
    c = LlmConfig.preset(family)
    return dataclasses.replace(
        c,
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=96,
        num_layers=3,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
    )


def test_z_image_encodes_the_chat_template_at_the_penultimate_layer() -> None:
    cfg = _tiny("qwen3-4b", 151936)  # the real vocabulary: the template's ids are Qwen's own
    with torch.no_grad():
        hf = hf_model("qwen3-4b", hf_config("qwen3-4b", cfg))
    tower = LlmTower(ours_from(hf, cfg), qwen_tokenizer(), Z_IMAGE_QWEN3)
    out = tower.encode("Hello world (not a weight:1.5)")
    ids = qwen_tokenizer().encode(
        "<|im_start|>user\nHello world (not a weight:1.5)<|im_end|>\n<|im_start|>assistant\n"
    )
    assert ids[:5] == [151644, 872, 198, 9707, 1879]  # no start token, no padding: the text alone
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[-2]
    assert out.hidden.shape == (1, len(ids), 64) and out.pooled is None
    assert torch.equal(out.mask, torch.ones(1, len(ids), dtype=torch.long))
    torch.testing.assert_close(out.hidden, ref, rtol=1e-5, atol=1e-5)


def test_lumina2_weights_against_the_empty_prompt_as_comfyui() -> None:
    model_bytes = gemma_like_spm()
    tok = SpmTokenizer(model_bytes)
    cfg = _tiny("gemma2-2b", 700)
    with torch.no_grad():
        hf = hf_model("gemma2-2b", hf_config("gemma2-2b", cfg, attn_logit_softcapping=None), attn="eager")
    tower = LlmTower(ours_from(hf, cfg), tok, LUMINA2_GEMMA2)
    system = LUMINA2_GEMMA2.text("")
    assert system.startswith("You are an assistant designed to generate superior images") and system.endswith(
        " <Prompt Start> "
    )
    out = tower.encode("a (cat:1.5) in rain")
    # ComfyUI: BOS, then each weighted segment tokenized on its own
    pieces = [(system + "a ", 1.0), ("cat", 1.5), (" in rain", 1.0)]
    ids, weights = [2], [1.0]
    for text, w in pieces:
        t = tok.encode(text)
        ids += t
        weights += [w] * len(t)
    empty = [2] + [0] * (len(ids) - 1)
    batch = torch.tensor([ids, empty])
    mask = torch.tensor([row_mask(ids, 0), row_mask(empty, 0)])
    assert mask[1].sum() == 1  # the empty prompt sees its BOS only
    with torch.no_grad():
        h = hf(input_ids=batch, attention_mask=mask, output_hidden_states=True).hidden_states[-2]
    w = torch.tensor(weights)[None, :, None]
    expected = torch.where(w != 1.0, (h[:1] - h[1:]) * w + h[1:], h[:1])
    torch.testing.assert_close(out.hidden, expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(out.hidden, h[:1])  # the weight changed the cat's positions
