"""What a streamed layer holds on the device while it computes: its stored copy, the values it is
decoded or cast into, and the decoder's scratch -- measured, kept as data.

Planning keeps room for the streamed layers in flight. Counting only their *stored* bytes (what
crosses the bus) left out what a quantized or fp8 layer turns into on the device: a Flux
3072 x 12288 layer in GGUF Q4_K is 20 MiB stored and held 441 MiB while it was dequantized whole in
float32 (now decoded in chunks into the compute dtype: 104 MiB), an fp8 layer upcast to bf16 3x
its stored size. ``bench/transients.py`` measures the peak live bytes of fetching, decoding,
patching and casting one layer per format (docs/benchmarks.md); the model here is

    in flight = stored + (numel x compute bytes, when the stored values are not computed as
                they are) + scratch of one decode chunk + (a LoRA: numel x compute bytes + the
                bake's row blocks)

with the per-format scratch from those measurements (:data:`SCRATCH_PER_CHUNK_ELEMENT`).
"""

from __future__ import annotations

import math
from types import MappingProxyType

from torch import Tensor, nn

from core.quant.dequant import CHUNK_ELEMENTS
from core.quant.tensor import DeferredWeight, QuantizedWeight, logical_shape

#: Scratch bytes per element of one dequantization chunk (float32 values and the formulas'
#: temporaries), measured by bench/transients.py on a 3072 x 12288 weight decoded to bf16 (CPU,
#: torch 2.13, 2026-11-25): Q8_0 8.1, Q4_K 12.2. Types not measured take the largest.
SCRATCH_PER_CHUNK_ELEMENT = MappingProxyType({"Q8_0": 8.1, "Q4_K": 12.2})
_SCRATCH_DEFAULT = max(SCRATCH_PER_CHUNK_ELEMENT.values())
#: A LoRA bake on the device works in float32 row blocks of this many elements, two of them.
BAKE_BLOCK_ELEMENTS = 1 << 22


def layer_inflight_bytes(
    weight: Tensor, bias: Tensor | None, compute_bytes: int, *, patched: bool = False, host: bool = False
) -> int:
    """Bytes one streamed layer holds on the device while it computes (see the module notes):
    the stored copy plus the larger of the decode (values + one chunk's scratch) and, with a
    LoRA, the bake (values + the patched copy + its float32 row blocks; on the host (``host``)
    the bake's blocks are cache-sized buffers kept between bakes, not counted)."""
    stored = weight.nbytes + (bias.nbytes if bias is not None else 0)
    deferred = isinstance(weight, DeferredWeight)
    numel = math.prod(logical_shape(weight))
    # the decoded values (a plain weight's cast is not counted: the compute dtype is known only
    # at forward, and a 16-bit weight on a card usually computes as stored)
    values = numel * compute_bytes if deferred else 0
    decode = values
    if isinstance(weight, QuantizedWeight):
        per = SCRATCH_PER_CHUNK_ELEMENT.get(weight.qtype, _SCRATCH_DEFAULT)
        decode += int(per * min(numel, CHUNK_ELEMENTS))
    if not patched:
        return stored + decode
    bake = values + numel * (compute_bytes if deferred else weight.element_size())
    if not host:
        bake += 2 * 4 * min(numel, BAKE_BLOCK_ELEMENTS)
    return stored + max(decode, bake)


def inflight_sizes(
    module: nn.Module, compute_bytes: int = 2, patched: frozenset[str] = frozenset()
) -> tuple[tuple[str, int], ...]:
    """(module name, bytes in flight when streamed) for every op layer whose in-flight cost is
    more than its stored bytes; ``patched`` names the layers a LoRA changes."""
    out = []
    for name, layer in module.named_modules():
        weight = getattr(layer, "weight", None)
        if not isinstance(weight, Tensor) or isinstance(layer, nn.Embedding) or weight.is_meta:
            continue  # an embedding sends only its rows; nothing on meta is streamed
        bias = getattr(layer, "bias", None)
        bias = bias if isinstance(bias, Tensor) else None
        stored = weight.nbytes + (bias.nbytes if bias is not None else 0)
        fly = layer_inflight_bytes(weight, bias, compute_bytes, patched=name in patched)
        if fly > stored:
            own = sum(t.nbytes for t in layer.parameters(recurse=False))
            own += sum(t.nbytes for t in layer.buffers(recurse=False))
            out.append((name, own + fly - stored))
    return tuple(out)
