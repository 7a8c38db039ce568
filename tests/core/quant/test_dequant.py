"""Dequantization in torch is bit-identical to gguf-py's numpy reference, for every type."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from core.quant.dequant import BLOCK_DEQUANT, dequantize
from core.quant.gguf_types import BY_NAME, DEQUANTIZABLE
from core.quant.tensor import QuantizedWeight, logical_shape

# byte offsets of each type's float16 scale fields inside a block
F16_FIELDS = {
    "Q8_0": (0,),
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q2_K": (80, 82),
    "Q3_K": (108,),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
}
TYPES = sorted(DEQUANTIZABLE)
# types gguf-py can quantize (its K-quants only dequantize): real quantized data for these
QUANTIZABLE = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")


def _random_blocks(qtype: str, n: int, seed: int) -> np.ndarray:
    """Every bit random, except the float16 scales, which are finite (random bytes there would
    make NaN, whose payload is not a property of the format)."""
    rng = np.random.default_rng(seed)
    spec = BY_NAME[qtype]
    blocks = rng.integers(0, 256, size=(n, spec.block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        scale = (rng.standard_normal(n) * 0.05).astype(np.float16)
        blocks[:, off : off + 2] = scale.view(np.uint8).reshape(n, 2)
    return blocks


def _reference(blocks: np.ndarray, qtype: str) -> np.ndarray:
    return np.asarray(quants.dequantize(blocks, GGMLQuantizationType[qtype]), dtype=np.float32).reshape(-1)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def test_every_listed_type_is_covered() -> None:
    assert set(BLOCK_DEQUANT) == set(DEQUANTIZABLE) == set(F16_FIELDS)


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("n_blocks", [1, 7, 64])
def test_random_blocks_bit_identical_to_gguf(qtype: str, n_blocks: int) -> None:
    spec = BY_NAME[qtype]
    blocks = _random_blocks(qtype, n_blocks, seed=n_blocks)
    ref = _reference(blocks, qtype)
    got = dequantize(torch.from_numpy(blocks.copy()), qtype, (n_blocks * spec.block,))
    assert got.dtype == torch.float32
    np.testing.assert_array_equal(_bits(got.numpy()), _bits(ref))


@pytest.mark.parametrize("qtype", QUANTIZABLE)
def test_gguf_quantized_data_round_trips_bit_identically(qtype: str) -> None:
    rng = np.random.default_rng(3)
    values = (rng.standard_normal((5, 96)) * 0.2).astype(np.float32)
    values[0, :32] = 0.0  # an all-zero block (scale 0)
    values[1, 5] = 40.0  # an outlier sets its block's scale
    data = quants.quantize(values, GGMLQuantizationType[qtype])
    ref = _reference(data, qtype)
    got = dequantize(torch.from_numpy(np.ascontiguousarray(data)), qtype, (5, 96))
    np.testing.assert_array_equal(_bits(got.reshape(-1).numpy()), _bits(ref))
    plain_rows = (got[2:] - torch.from_numpy(values[2:])).abs().max()  # rows without the outlier
    assert float(plain_rows) < 0.15


@pytest.mark.parametrize("qtype", TYPES)
def test_misaligned_bytes_and_narrow_dtypes(qtype: str) -> None:
    """Bytes at an odd address (a view into a bigger buffer, as a memory-mapped file gives) read
    the same; casting to fp16/bf16 happens after the float32 math, so it equals numpy's values
    rounded once."""
    spec = BY_NAME[qtype]
    blocks = _random_blocks(qtype, 3, seed=11)
    buf = torch.zeros(blocks.size + 1, dtype=torch.uint8)
    buf[1:] = torch.from_numpy(blocks.reshape(-1))
    view = buf[1:]
    assert view.storage_offset() == 1
    ref = torch.from_numpy(_reference(blocks, qtype))
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        got = dequantize(view, qtype, (3, spec.block), dtype)
        assert got.dtype == dtype and got.shape == (3, spec.block)
        assert torch.equal(
            got.reshape(-1).view(torch.int16 if dtype != torch.float32 else torch.int32),
            ref.to(dtype).view(torch.int16 if dtype != torch.float32 else torch.int32),
        )


def test_nan_scales_give_nan_where_the_reference_does() -> None:
    rng = np.random.default_rng(5)
    for qtype in TYPES:
        spec = BY_NAME[qtype]
        blocks = rng.integers(0, 256, size=(40, spec.block_bytes), dtype=np.uint8)  # scales too
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = _reference(blocks, qtype)
        got = dequantize(torch.from_numpy(blocks.copy()), qtype, (40 * spec.block,)).numpy()
        assert np.array_equal(np.isnan(got), np.isnan(ref)), qtype
        finite = ~np.isnan(ref)
        np.testing.assert_array_equal(_bits(got[finite]), _bits(ref[finite]))


def test_wrong_byte_count_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot hold"):
        dequantize(torch.zeros(33, dtype=torch.uint8), "Q8_0", (32,))
    with pytest.raises(ValueError, match="cannot hold"):
        dequantize(torch.zeros(34, dtype=torch.uint8), "Q8_0", (31,))
    with pytest.raises(ValueError, match="cannot dequantize"):
        dequantize(torch.zeros(18, dtype=torch.uint8), "IQ4_NL", (32,))


def test_quantized_weight_moves_as_bytes_and_keeps_its_type() -> None:
    blocks = _random_blocks("Q4_K", 4, seed=2)
    q = QuantizedWeight(torch.from_numpy(blocks.reshape(-1).copy()), "Q4_K", (4, 256))
    assert q.nbytes == 4 * 144 and logical_shape(q) == (4, 256)
    for moved in (
        q.detach(),
        q.to("cpu", copy=True),
        q.clone(),
        q.data,
        torch.nn.Parameter(q, requires_grad=False),
    ):
        assert isinstance(moved, QuantizedWeight) and moved.qtype == "Q4_K" and moved.qshape == (4, 256)
        assert torch.equal(moved.dequantize(), q.dequantize())
    assert not isinstance(q + 1, QuantizedWeight)  # arithmetic sees plain bytes
    doubled = q.with_patch(lambda w: w * 2)
    assert doubled.data_ptr() == q.data_ptr()  # no copy
    assert torch.equal(doubled.materialize(torch.float32), q.dequantize() * 2)
    assert doubled.detach().patch is not None and q.patch is None
    with pytest.raises(ValueError):
        QuantizedWeight(torch.zeros(10, dtype=torch.uint8), "Q4_K", (256,))


@pytest.mark.gpu
@pytest.mark.parametrize("qtype", TYPES)
def test_cuda_dequant_bit_identical(qtype: str) -> None:
    spec = BY_NAME[qtype]
    blocks = _random_blocks(qtype, 300, seed=9)
    ref = _reference(blocks, qtype)
    got = dequantize(torch.from_numpy(blocks.copy()), qtype, (300 * spec.block,), device="cuda")
    assert got.device.type == "cuda"
    np.testing.assert_array_equal(_bits(got.cpu().numpy()), _bits(ref))


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_K", "Q6_K", "Q3_K"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_dequantizing_into_a_narrower_dtype_works_in_chunks_to_the_same_bits(
    qtype: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Into bf16/fp16 the weight is decoded a chunk of blocks at a time (the float32 values and
    the formulas' temporaries were 8-12 bytes an element of the whole weight at once), with the
    bits of the one-piece decode; the peak holds the output and one chunk's work."""
    from core.quant import dequant as dq
    from tests.core.quant.test_table_rows import LargestFloat

    spec = BY_NAME[qtype]
    raw = torch.from_numpy(_random_blocks(qtype, 64, 3)).reshape(-1)
    shape = (8, 8 * spec.block)
    whole = dequantize(raw, qtype, shape, torch.float32).to(dtype)
    monkeypatch.setattr(dq, "CHUNK_ELEMENTS", 4 * spec.block)
    with LargestFloat(torch.float32) as seen:
        chunked = dequantize(raw, qtype, shape, dtype)
    assert chunked.dtype == dtype and chunked.shape == shape
    assert torch.equal(chunked.view(torch.int16), whole.view(torch.int16))
    assert 0 < seen.most <= 4 * spec.block  # float32 work exists for one chunk (4 blocks) at a time
