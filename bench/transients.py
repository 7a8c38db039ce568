"""What a streamed layer holds on the device while it is materialised: stored copy + values +
scratch, measured per weight format (``core.memory.transients`` keeps the result as data).

For each format a Flux-shaped linear weight (3072 x 12288 by default) streams through
``core.ops.streaming`` to the CPU standing in for the device, and a ``TorchDispatchMode`` counts
every storage an op creates while the layer's weight is fetched, decoded, patched (with a LoRA
of rank 16 when ``--lora``) and cast to the compute dtype, until the layer's forward returns. The
peak of those live bytes, over the weight's logical element count, is the format's in-flight
bytes per element. Prints JSON.

    .venv/bin/python -m bench.transients [--rows 3072 --cols 12288] [--dtype bf16]
"""

from __future__ import annotations

import argparse
import json
import weakref
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, quants
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from core.memory.transients import layer_inflight_bytes
from core.ops.layers import Linear
from core.ops.streaming import patch_fn_from, stream_layers, unstream_layers
from core.patching.adapters import LoRAAdapter
from core.patching.patcher import KeyPatch, ModelPatcher
from core.quant.fp8_weight import ScaledFp8Weight
from core.quant.tensor import QuantizedWeight

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class LiveBytes(TorchDispatchMode):
    """Peak bytes of storages created inside the mode and still alive."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.now = 0
        self.peak = 0

    def _freed(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        before = {
            t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)
        }
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            s = t.untyped_storage()
            key = s._cdata
            if key in before or key in self.live:
                continue
            self.live[key] = int(s.nbytes())
            self.now += self.live[key]
            self.peak = max(self.peak, self.now)
            weakref.finalize(s, self._freed, key)
        return out


def weight(fmt: str, rows: int, cols: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(rows, cols, generator=g) / cols**0.5
    if fmt == "fp8":
        scale = w.abs().amax() / 448
        return ScaledFp8Weight((w / scale).to(torch.float8_e4m3fn), scale.reshape(()))
    if fmt in ("Q8_0", "Q4_K"):
        gtype = GGMLQuantizationType[fmt]
        if fmt == "Q8_0":
            raw = quants.quantize(w.numpy(), gtype)
        else:  # numpy cannot quantize K types: valid random blocks (scales as fp16 ones)
            rng = np.random.default_rng(0)
            raw = rng.integers(0, 256, (rows, cols // 256 * 144), dtype=np.uint8)
            raw.reshape(rows, -1, 144)[:, :, :4] = np.frombuffer(
                np.array([0.01, 0.001], np.float16).tobytes(), np.uint8
            )
        return QuantizedWeight(torch.from_numpy(np.ascontiguousarray(raw)).reshape(-1), fmt, (rows, cols))
    return w.to(DTYPES[fmt])


def measure(fmt: str, rows: int, cols: int, dtype: torch.dtype, lora: bool) -> dict[str, Any]:
    layer = Linear(cols, rows, bias=False, device="meta")
    layer.weight = torch.nn.Parameter(weight(fmt, rows, cols), requires_grad=False)
    patch_fn = None
    if lora:
        patcher = ModelPatcher(layer)
        g = torch.Generator().manual_seed(1)
        up, down = torch.randn(rows, 16, generator=g), torch.randn(16, cols, generator=g)
        patcher.add_patches("lora", {"weight": [KeyPatch(LoRAAdapter(up, down, alpha=16.0))]})
        patch_fn = patch_fn_from(lambda key, base: patcher.patched_weight(key.removeprefix("."), base))
    if fmt in DTYPES:  # a plain 16-bit weight computes as stored (a card's usual case): no cast
        dtype = DTYPES[fmt]
    x = torch.randn(1, cols, dtype=dtype)
    group = stream_layers(layer, [""], "cpu", patch_fn=patch_fn, prefetch=False)
    try:
        with torch.no_grad(), LiveBytes() as live:
            out = layer(x)
        del out
    finally:
        unstream_layers(layer, [""])
    del group
    numel = rows * cols
    stored = layer.weight.nbytes
    predicted = layer_inflight_bytes(layer.weight, None, dtype.itemsize, patched=lora, host=True)
    return {
        "format": fmt, "lora": lora, "dtype": str(dtype).removeprefix("torch."), "shape": [rows, cols],
        "stored_bytes": stored, "peak_bytes": live.peak, "peak_per_element": round(live.peak / numel, 3),
        "beyond_stored_per_element": round((live.peak - stored) / numel, 3),
        "predicted_bytes": predicted, "measured_over_predicted": round(live.peak / predicted, 3),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=3072)
    ap.add_argument("--cols", type=int, default=12288)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--formats", default="fp16,bf16,fp8,Q8_0,Q4_K")
    ns = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = [
        measure(f, ns.rows, ns.cols, DTYPES[ns.dtype], lora)
        for f in ns.formats.split(",")
        for lora in (False, True)
    ]
    print(json.dumps({"torch": torch.__version__, "results": rows}, indent=1))


if __name__ == "__main__":
    main()
