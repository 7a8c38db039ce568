"""Qwen-Image's prompt encoding as ComfyUI's ``text_encoders/qwen_image`` does it, against
transformers' ``Qwen2_5_VLTextModel`` (real vocabulary, narrow width): the template with its
system prompt, the last (final-normed) hidden state, no prompt weights, and the template's system
part dropped through ``<|im_start|>user\\n`` (34 tokens, diffusers' ``drop_idx`` too); a prompt that
brings its own template is read as it is."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from core.archs.llm.towers import QWEN_IMAGE_QWEN25VL, TemplateDrop
from core.models.llm import LlmConfig
from core.text.llm import LlmTower, qwen_tokenizer
from tests.core.models.llm.reference import hf_config, hf_model, ours_from

pytestmark = pytest.mark.usefixtures("one_thread")

SYSTEM = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, "
    "spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n"
)
END = "<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def pair() -> tuple[torch.nn.Module, LlmTower]:
    cfg = dataclasses.replace(
        LlmConfig.preset("qwen2.5-vl-7b"),  # the real vocabulary: the template's ids are Qwen's own
        hidden_size=256, intermediate_size=96, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=128,
    )  # fmt: skip
    with torch.no_grad():
        hf = hf_model("qwen2.5-vl-7b", hf_config("qwen2.5-vl-7b", cfg))
    return hf, LlmTower(ours_from(hf, cfg), qwen_tokenizer(), QWEN_IMAGE_QWEN25VL)


def _reference(hf: torch.nn.Module, text: str) -> tuple[list[int], torch.Tensor]:
    ids = qwen_tokenizer().encode(text)
    with torch.no_grad():
        states = hf(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    return ids, states[-1]


def test_the_template_is_read_whole_and_its_system_part_dropped(
    pair: tuple[torch.nn.Module, LlmTower],
) -> None:
    hf, tower = pair
    prompt = "A coffee shop sign reads (Qwen Coffee:1.3) $2"
    ids, ref = _reference(hf, SYSTEM + prompt + END)
    assert len(qwen_tokenizer().encode(SYSTEM)) == 34  # what ComfyUI's rule and diffusers' drop_idx drop
    out = tower.encode(prompt)
    assert out.pooled is None
    assert out.hidden.shape == (1, len(ids) - 34, 256)
    torch.testing.assert_close(out.hidden, ref[:, 34:], rtol=1e-5, atol=1e-5)  # no weights: brackets are text
    assert torch.equal(out.mask, torch.ones(1, len(ids) - 34, dtype=torch.long))
    # the dropped tokens still condition the kept ones: the prompt alone encodes otherwise
    alone = _reference(hf, prompt + END)[1]
    assert not torch.allclose(out.hidden, alone, atol=1e-3)


def test_the_empty_prompt_keeps_the_closing_tokens(pair: tuple[torch.nn.Module, LlmTower]) -> None:
    hf, tower = pair
    ids, ref = _reference(hf, SYSTEM + END)
    out = tower.encode("")
    assert out.hidden.shape[1] == len(ids) - 34 == len(qwen_tokenizer().encode(END))
    torch.testing.assert_close(out.hidden, ref[:, 34:], rtol=1e-5, atol=1e-5)


def test_a_prompt_with_its_own_template_is_read_as_it_is(pair: tuple[torch.nn.Module, LlmTower]) -> None:
    """ComfyUI skips its template for a prompt that starts with ``<|im_start|>`` and drops by the
    same rule: through the second ``<|im_start|>`` and the ``user\\n`` after it."""
    hf, tower = pair
    own = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\na red cube<|im_end|>\n"
    ids, ref = _reference(hf, own)
    start = ids.index(151644, 1) + 3
    out = tower.encode(own)
    torch.testing.assert_close(out.hidden, ref[:, start:], rtol=1e-5, atol=1e-5)


def test_the_drop_rule_in_its_edge_cases() -> None:
    rule = TemplateDrop(151644, 2, (872, 198))
    assert rule.start([5, 6, 7]) == 0  # no marker: nothing dropped
    assert rule.start([151644, 872, 198, 9]) == 3  # one marker: through it and "user\n"
    assert rule.start([151644, 1, 151644, 872, 198, 9, 151644]) == 5  # the second, not the third
    assert rule.start([151644, 1, 151644, 5, 6]) == 2  # not followed by "user\n": from the marker on
    assert rule.start([151644, 1, 151644, 872, 198]) == 2  # nothing after "user\n": kept
