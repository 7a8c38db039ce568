"""T5 encoders in ComfyUI-GGUF's text-encoder files (llama.cpp names: ``enc.blk.0.attn_q.weight``,
``token_embd.weight``, ``enc.output_norm.weight``...) load into Loadout's T5 encoder with their
weights still quantized, the token embedding and relative-attention bias included, and compute
exactly what the encoder computes with the dequantized weights baked in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from core.files import read_tensor_index
from core.files.gguf import T5_NAMES
from core.inspect import inspect_file
from core.loading.check import check_file
from core.loading.loader import load_text_encoder
from core.ops.streaming import patch_fn_from, stream_layers, streamable_layers, unstream_layers
from core.patching.patcher import ModelPatcher
from core.quant.tensor import QuantizedWeight
from tests.core.ops import lora_patches, op_layers
from tests.fixtures.gguf_quant import write_comfy_gguf
from tests.fixtures.tiny_models import TINY_T5


def llama_cpp_name(key: str) -> str:
    """The inverse of ComfyUI-GGUF's T5 map (its replacements undone in reverse order)."""
    for old, new in reversed(T5_NAMES):
        key = key.replace(new, old)
    return key


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", params=["Q8_0", "Q4_K", "Q5_1"])
def written(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Tensor]]:
    state = {llama_cpp_name(k): v for k, v in TINY_T5.file_state().items()}
    assert "enc.blk.0.attn_q.weight" in state and "token_embd.weight" in state
    assert "enc.blk.0.attn_rel_b.weight" in state and "enc.output_norm.weight" in state
    path = tmp_path_factory.mktemp("t5") / f"t5-{request.param}.gguf"
    _, reference, _ = write_comfy_gguf(path, "t5encoder", state, request.param)
    ours = {k: v for k, v in reference.items()}
    for old, new in T5_NAMES:
        ours = {k.replace(old, new): v for k, v in ours.items()}
    return path, ours


def _baked(module: nn.Module, reference: dict[str, Tensor]) -> nn.Module:
    state = module.state_dict(keep_vars=True)
    baked = {k: reference[k].clone() if isinstance(v, QuantizedWeight) else v for k, v in state.items()}
    out = TINY_T5.architecture.build(TINY_T5.config, "cpu", None)
    out.load_state_dict(baked, strict=True, assign=True)
    return out.eval().requires_grad_(False)


def test_t5_gguf_loads_quantized_and_matches_the_baked_encoder(
    written: tuple[Path, dict[str, Tensor]],
) -> None:
    path, reference = written
    loaded = load_text_encoder(path)
    assert loaded.family == TINY_T5.family
    module = loaded.module
    assert isinstance(module.shared.weight, QuantizedWeight)  # the embedding stays quantized
    # the bias table (32 buckets x 4 heads) has rows too short for blocks: F16, as in real files
    rel = module.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight
    assert rel.dtype == torch.float16
    index = read_tensor_index(path)
    assert loaded.nbytes == sum(t.nbytes for t in index.tensors.values())
    baked = _baked(module, reference)
    expected = TINY_T5.forward(baked)
    assert torch.equal(TINY_T5.forward(module)[0], expected[0])

    # streamed: the small bias tables travel whole; of the quantized vocabulary only the stored
    # bytes of the 14 rows the prompt looks up travel (never the table, never in fp32)
    names = [n for n, _ in streamable_layers(module)]
    group = stream_layers(module, names, "cpu")
    try:
        assert torch.equal(TINY_T5.forward(module)[0], expected[0])
        group.end_forward()
        table = module.shared.weight
        row = table.nbytes // table.logical_shape[0]
        others = sum(nb for n, nb in streamable_layers(module) if n != "shared")
        assert group.stats.last_forward_bytes == others + 14 * row
    finally:
        unstream_layers(module, names)

    # a LoRA on the quantized linears, baked and streamed
    patches = lora_patches(baked, op_layers(baked)[1::2], seed=4)
    ref = ModelPatcher(baked)
    ref.add_patches("lora", patches, 0.8)
    ref.apply()
    wanted = TINY_T5.forward(baked)[0]
    patcher = ModelPatcher(module)
    patcher.add_patches("lora", patches, 0.8)
    patcher.apply()
    assert torch.equal(TINY_T5.forward(module)[0], wanted)
    patcher.unpatch()
    stream_layers(module, names, "cpu", patch_fn=patch_fn_from(patcher.patched_weight))
    try:
        assert torch.equal(TINY_T5.forward(module)[0], wanted)
    finally:
        unstream_layers(module, names)


def test_check_and_inspect_read_t5_gguf_as_t5(written: tuple[Path, dict[str, Tensor]]) -> None:
    path, _ = written
    assert check_file(path)["ok"]
    record = inspect_file(path).to_json()
    assert record["family"] == TINY_T5.family and record["kind"] == "text_encoder"
    assert record["metadata"]["loadout.quantization"]
