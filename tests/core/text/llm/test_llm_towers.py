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


def test_an_encoder_of_another_family_is_refused_in_words() -> None:
    """Qwen's template ids on a Gemma-sized vocabulary: a clear refusal, not an index error."""
    from core.errors import ModelMismatchError
    from tests.fixtures.llm_files import model_from, random_state, small_config

    cfg = small_config("gemma2-2b")  # 512 tokens: Qwen's <|im_start|> (151644) is past it
    tower = LlmTower(model_from(cfg, random_state(cfg)), qwen_tokenizer(), Z_IMAGE_QWEN3)
    with pytest.raises(ModelMismatchError, match="vocabulary"):
        tower.encode("a cat")


def test_a_gemma_file_without_spiece_model_reads_the_tokenizer_model_beside_it(tmp_path: object) -> None:
    from pathlib import Path

    from safetensors.torch import save_file

    from core.text.llm import tokenizer_for

    folder = Path(str(tmp_path))
    save_file({"model.norm.weight": torch.ones(4)}, str(folder / "model.safetensors"))
    (folder / "tokenizer.model").write_bytes(gemma_like_spm())
    tok = tokenizer_for(LUMINA2_GEMMA2, folder / "model.safetensors")
    assert tok.encode("a cat") == SpmTokenizer(gemma_like_spm()).encode("a cat")


def test_conventions_build_llm_towers_by_kind() -> None:
    """A convention's TowerSpec of kind "llm" builds the LLM tower (core.text.towers); Gemma's needs
    the tokenizer read from its file, and says so without one."""
    from core.errors import LoadoutError
    from core.text.llm import LUMINA2_TOWER, Z_IMAGE_TOWER
    from core.text.towers import TowerContext, build_tower
    from tests.fixtures.llm_files import model_from, random_state, small_config

    ctx = TowerContext("z_image", None, None, None, torch.float32, None)
    qwen = small_config("qwen3-4b")
    tower = build_tower(Z_IMAGE_TOWER, model_from(qwen, random_state(qwen)), ctx)
    assert isinstance(tower, LlmTower) and tower.spec is Z_IMAGE_TOWER.options
    gemma = dataclasses.replace(small_config("gemma2-2b"), vocab_size=700)  # the test model's 700 pieces
    module = model_from(gemma, random_state(gemma))
    with pytest.raises(LoadoutError, match="SentencePiece"):
        build_tower(LUMINA2_TOWER, module, ctx)
    tok = SpmTokenizer(gemma_like_spm())
    with_tok = TowerContext("lumina2", None, None, None, torch.float32, None, {"gemma2-2b": tok})
    built = build_tower(LUMINA2_TOWER, module, with_tok)
    assert isinstance(built, LlmTower) and built.tokenizer is tok
    assert built.encode("a cat").hidden.shape[-1] == gemma.hidden_size
