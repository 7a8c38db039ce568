"""Qwen3, Gemma-2, Llama-3.1 and Mistral Small 3 text encoders in GGUF files under llama.cpp's
names (``blk.N.attn_q.weight``), quantized as the diffusion GGUFs are (Q8_0, Q4_K): detected,
checked, loaded with the weights kept quantized, and equal to the network built from gguf-py's own
dequantization. Gemma's norms, which llama.cpp stores as ``1 + w``, come back as ``w``; Llama's
q/k rows, which its converter permutes, come back in transformers' order."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.errors import FileFormatError
from core.files.gguf_llm import llm_transformers_names
from core.loading.check import check_file
from core.loading.loader import inspect_for_loading, load_text_encoder
from core.quant.tensor import DeferredWeight
from tests.fixtures.gguf_quant import write_comfy_gguf
from tests.fixtures.llm_files import model_from, random_state, small_config

pytestmark = pytest.mark.usefixtures("one_thread")

_TO_GGUF = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
}
_GEMMA = {
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}


def llama_cpp_name(key: str, gemma: bool) -> str:
    """What llama.cpp's converter names a transformers key (written independently of the loader)."""
    if key == "model.embed_tokens.weight":
        return "token_embd.weight"
    if key == "model.norm.weight":
        return "output_norm.weight"
    _, _, layer, *rest = key.split(".")
    part, kind = ".".join(rest[:-1]), rest[-1]
    table = {**_TO_GGUF, **(_GEMMA if gemma else {"post_attention_layernorm": "ffn_norm"})}
    return f"blk.{layer}.{table[part]}.{kind}"


@pytest.mark.parametrize(
    "family, arch, qtype", [("qwen3-4b", "qwen3", "Q8_0"), ("gemma2-2b", "gemma2", "Q4_K")]
)
def test_llama_cpp_named_encoder_loads_quantized(tmp_path: Path, family: str, arch: str, qtype: str) -> None:
    cfg = small_config(family)
    state = random_state(cfg, seed=3)
    gemma = arch.startswith("gemma")
    stored = {
        llama_cpp_name(k, gemma): (v + 1.0 if gemma and k.endswith("norm.weight") else v)
        for k, v in state.items()
    }
    path, reference, _types = write_comfy_gguf(tmp_path / "te.gguf", arch, stored, qtype)
    det = inspect_for_loading(path)[1]
    assert (det.kind, det.family) == ("text_encoder", family)
    assert check_file(path)["ok"]
    loaded = load_text_encoder(path)
    assert isinstance(loaded.module.model.layers[0].mlp.up_proj.weight, DeferredWeight)  # kept quantized
    back = {k: reference[llama_cpp_name(k, gemma)].float() for k in state}
    if gemma:
        back = {k: v - 1.0 if k.endswith("norm.weight") else v for k, v in back.items()}
        norm = loaded.module.model.layers[0].post_feedforward_layernorm.weight
        torch.testing.assert_close(norm.float(), state["model.layers.0.post_feedforward_layernorm.weight"])
    ids = torch.tensor([[5, 6, 100, 7, 301, 2]])
    with torch.no_grad():
        got = loaded.module(ids, taps=(-2,), dtype=torch.float32)[0]
        want = model_from(cfg, back)(ids, taps=(-2,), dtype=torch.float32)[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def _llama_cpp_permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp's converter's q/k row order (its ``permute``), written from its definition."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _llama_cpp_unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("family, qtype", [("llama3.1-8b", "Q8_0"), ("mistral3-24b", "F32")])
def test_llama_and_mistral_ggufs_load_with_their_qk_rows_put_back(
    tmp_path: Path, family: str, qtype: str
) -> None:
    """Llama-3.1 (HiDream) and Mistral Small 3 (FLUX.2) GGUFs are llama.cpp's "llama"
    architecture, whose q/k rows its converter permutes: loaded, they are the network they came from."""
    cfg = small_config(family)
    state = random_state(cfg, seed=4)
    heads = {"q_proj": cfg.num_heads, "k_proj": cfg.num_kv_heads}
    stored = {}
    for k, v in state.items():
        part = k.split(".")[-2]
        stored[llama_cpp_name(k, False)] = _llama_cpp_permute(v, heads[part]) if part in heads else v
    meta = {"llama.attention.head_count": cfg.num_heads, "llama.attention.head_count_kv": cfg.num_kv_heads}
    path, reference, _types = write_comfy_gguf(tmp_path / "te.gguf", "llama", stored, qtype, metadata=meta)
    det = inspect_for_loading(path)[1]
    assert (det.kind, det.family) == ("text_encoder", family)
    assert check_file(path)["ok"]
    loaded = load_text_encoder(path)
    back = {}
    for k in state:
        part = k.split(".")[-2]
        ref = reference[llama_cpp_name(k, False)].float()
        back[k] = _llama_cpp_unpermute(ref, heads[part]) if part in heads else ref
    if qtype == "F32":
        assert all(torch.equal(back[k], state[k]) for k in state)
    else:
        assert isinstance(
            loaded.module.model.layers[0].self_attn.q_proj.weight, DeferredWeight
        )  # still quantized
    ids = torch.tensor([[5, 6, 100, 7, 301, 2]])
    with torch.no_grad():
        got = loaded.module(ids, taps=(-2,), dtype=torch.float32)[0]
        want = model_from(cfg, back)(ids, taps=(-2,), dtype=torch.float32)[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_llama_gguf_without_head_counts_is_refused_in_words(tmp_path: Path) -> None:
    cfg = small_config("llama3.1-8b")
    stored = {llama_cpp_name(k, False): v for k, v in random_state(cfg).items()}
    path, _, _ = write_comfy_gguf(tmp_path / "te.gguf", "llama", stored, "F32")
    with pytest.raises(FileFormatError, match="does not say its attention head counts"):
        load_text_encoder(path)


def test_llama_cpp_names_become_transformers_names() -> None:
    names = ["token_embd.weight", "blk.0.attn_q.weight"]
    assert llm_transformers_names(names, "mistral") is None  # not a llama.cpp LLM architecture we load
    assert (
        llm_transformers_names(names, "llama")
        == llm_transformers_names(names, "qwen3")
        == {
            "model.embed_tokens.weight": "token_embd.weight",
            "model.layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight",
        }
    )
