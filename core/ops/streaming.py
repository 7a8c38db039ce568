"""Streamed layers: weights that stay in host memory and reach the compute device per forward.

A partially loaded model keeps on the device what fits and streams the rest. A streamed layer's
weight and bias stay where they are (the CPU; a pinned copy when the pinning budget allows), and
every forward

1. runs the interrupt check (once per layer, so a stop lands within one layer's work),
2. copies weight and bias to the input's device into fresh tensors (on CUDA the copy of the *next*
   layer was already started on a side stream while this one computed: prefetch),
   (a quantized weight is copied as its quantized bytes and dequantized on the device),
3. applies the layer's patches (LoRA...) to the copy, in the compute dtype when the weight is fp8
   so that a small LoRA change is not rounded away, and
4. casts to the input's dtype.

The stored parameters are never written. The mechanism lives in one declared slot of the op
layers, ``CastWeights.stream``: :func:`stream_layers` fills it for the named layers and
:func:`unstream_layers` empties it. Nothing else is attached to a module.

The order layers run in is learned on the first forward (for prefetching); a forward is taken to
end when a streamed layer runs again, or when :meth:`StreamedLayers.end_forward` is called.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.ops.alignment import copy_for_compute
from core.ops.fp8 import is_fp8
from core.ops.layers import CastWeights
from core.ops.staging import StagingRing
from core.ops.stream_group import StreamedLayers, StreamStats
from core.quant.tensor import DeferredWeight

__all__ = [
    "HostCopy", "InterruptCheck", "LayerStream", "PatchFn", "Staged", "StreamStats", "StreamedLayers",
    "patch_fn_from", "plan_pinning", "stream_layers", "streamable_layers", "unstream_layers",
]  # fmt: skip

#: ``patch(key, base) -> weight``: the weight of state-dict key ``key`` with its patch stack applied
#: to ``base`` (a fresh copy on the compute device); ``base`` itself when nothing patches ``key``.
PatchFn = Callable[[str, Tensor], Tensor]
#: Raises (:class:`core.errors.InterruptedByUser`) to stop; called once per streamed layer.
InterruptCheck = Callable[[], None]


def patch_fn_from(patched_weight: Callable[[str, Tensor], tuple[Tensor, bool]]) -> PatchFn:
    """A :data:`PatchFn` from ``ModelPatcher.patched_weight`` (which also says whether only cached
    deltas were used): ``stream_layers(..., patch_fn=patch_fn_from(patcher.patched_weight))``."""

    def patch(key: str, base: Tensor) -> Tensor:
        return patched_weight(key, base)[0]

    return patch


@dataclass(frozen=True, eq=False)
class HostCopy:
    """Pinned (page-locked) host copies of a layer's weight and bias, so copies to the GPU are
    asynchronous and run at full bus speed."""

    weight: Tensor = field(repr=False)
    bias: Tensor | None = field(repr=False)

    @property
    def nbytes(self) -> int:
        return self.weight.nbytes + (self.bias.nbytes if self.bias is not None else 0)


@dataclass(frozen=True, eq=False)
class Staged:
    """Fresh device copies of one layer's weight and bias; ``ready`` is recorded on the side stream
    after the copy when it ran there (None: the copy is ordered on the current stream already)."""

    device: torch.device
    weight: Tensor = field(repr=False)
    bias: Tensor | None = field(repr=False)
    ready: torch.cuda.Event | None = None


@dataclass(eq=False)
class LayerStream:
    """Everything one streamed layer needs at forward: the source of its weight and bias, its key
    and patch function, the device, an optional pinned copy, the copy started ahead, the interrupt
    check, and the group it belongs to."""

    key: str  # the layer's name in the patched module: patches are looked up as f"{key}.weight"
    weight: Tensor = field(repr=False)  # the stored parameter, never written
    bias: Tensor | None = field(repr=False)
    device: torch.device
    group: StreamedLayers = field(repr=False)
    patch_fn: PatchFn | None = None
    interrupt: InterruptCheck | None = None
    pinned: HostCopy | None = None
    staged: Staged | None = None  # the copy started ahead, taken by the next forward
    #: an embedding table: its forward looks rows up where the table lives (see :meth:`look_up`)
    table: bool = False
    #: whether ``patch_fn`` changes a key (None: assume it does)
    touches: Callable[[str], bool] | None = None
    _ptrs: tuple[int, int] = field(default=(0, 0), init=False, repr=False)

    def __post_init__(self) -> None:
        self._ptrs = _ptrs(self.weight, self.bias)

    @property
    def nbytes(self) -> int:
        return self.weight.nbytes + (self.bias.nbytes if self.bias is not None else 0)

    def patched(self) -> bool:
        """Whether a patch changes this layer's weight or bias (an fp8 layer nothing patches may
        multiply in fp8 although it streams)."""
        if self.patch_fn is None:
            return False
        if self.touches is None:
            return True
        return self.touches(f"{self.key}.weight") or self.touches(f"{self.key}.bias")

    # -- at forward ---------------------------------------------------------------------------
    def cast(
        self, weight: Tensor, bias: Tensor | None, device: torch.device, dtype: torch.dtype | None
    ) -> tuple[Tensor, Tensor | None]:
        """The weight and bias to compute with: fresh copies on ``device``, patched, in ``dtype``
        (None: the stored dtype). ``weight`` and ``bias`` are the layer's current parameters."""
        staged, ahead = self._fetch(weight, bias, device)
        w, patched_w = self._finish(staged.weight, "weight", dtype)
        b, patched_b = (None, False) if staged.bias is None else self._finish(staged.bias, "bias", dtype)
        self.group.stats.record(self.nbytes, patched=patched_w or patched_b, prefetched=ahead)
        return w, b

    def fetch(
        self, weight: Tensor, bias: Tensor | None, device: torch.device
    ) -> tuple[Tensor, Tensor | None]:
        """Fresh copies on ``device`` in the stored dtype, unpatched (the fp8 matmul path, taken only
        when there is no patch function)."""
        staged, ahead = self._fetch(weight, bias, device)
        self.group.stats.record(self.nbytes, patched=False, prefetched=ahead)
        return staged.weight, staged.bias

    def look_up(
        self, weight: Tensor, ids: Tensor, device: torch.device, dtype: torch.dtype | None = None
    ) -> Tensor | None:
        """An embedding's rows for ``ids``, gathered where the table lives and sent to ``device``:
        a 49,408 x 768 CLIP table (76 MB) or T5's (263 MB) never travels, only the rows a prompt
        uses. A gather copies values exactly, so the rows are those of a resident table, bit for
        bit. A quantized or fp8 table (GGUF, scaled fp8) sends the stored bytes of those rows and
        decodes them on ``device`` in ``dtype`` (as a resident table does): a T5 table
        is never materialised whole. None when the table must travel after all: patched (the
        patched table is made where the resident one would be), or small."""
        if not self.table:
            return None
        deferred = self.weight if isinstance(self.weight, DeferredWeight) else None
        rows_of_table = int(deferred.logical_shape[0]) if deferred is not None else self.weight.shape[0]
        if ids.numel() * (self.weight.nbytes // max(1, rows_of_table)) >= self.weight.nbytes:
            return None  # a small table (T5's position buckets, looked up L x L times) travels whole
        self._check(weight, None)
        if self.patch_fn is not None and self.patch_fn(f"{self.key}.weight", self.weight) is not self.weight:
            return None
        self.group.after_fetch(self, device)  # first: a repeat closes the previous forward
        if deferred is not None:
            rows = deferred.rows(ids.to(device), dtype or torch.float32)  # as a resident table's
            sent = ids.numel() * (self.weight.nbytes // max(1, rows_of_table))
        else:
            rows = F.embedding(ids.to(self.weight.device), self.weight).to(device)
            sent = rows.nbytes
        self.group.stats.record(sent, patched=False, prefetched=False)
        return rows

    def _check(self, weight: Tensor, bias: Tensor | None) -> None:
        if self.interrupt is not None:
            self.interrupt()
        if weight is not self.weight or bias is not self.bias or _ptrs(weight, bias) != self._ptrs:
            raise RuntimeError(
                f"layer {self.key!r}: its weight or bias was replaced or moved while it was streamed; "
                "call unstream_layers before changing a streamed layer's weights, then stream it again"
            )

    def _fetch(self, weight: Tensor, bias: Tensor | None, device: torch.device) -> tuple[Staged, bool]:
        if self.interrupt is not None:
            self.interrupt()
        if weight is not self.weight or bias is not self.bias or _ptrs(weight, bias) != self._ptrs:
            raise RuntimeError(
                f"layer {self.key!r}: its weight or bias was replaced or moved while it was streamed; "
                "call unstream_layers before changing a streamed layer's weights, then stream it again"
            )
        staged = self._take(device)
        ahead = staged is not None
        if staged is None:
            staged = self.copy_to(device, None)
        self.group.after_fetch(self, device)
        return staged, ahead

    def _finish(self, t: Tensor, part: str, dtype: torch.dtype | None) -> tuple[Tensor, bool]:
        patched = False
        if isinstance(t, DeferredWeight):  # the stored bytes were copied: materialize them here
            t = t.materialize(dtype or torch.float32)
        if self.patch_fn is not None:
            if is_fp8(t.dtype) and dtype is not None and not is_fp8(dtype):
                t = t.to(dtype)  # patch in the compute dtype: an fp8 round trip erases small LoRAs
            out = self.patch_fn(f"{self.key}.{part}", t)
            patched = out is not t
            t = out
        if dtype is not None and t.dtype != dtype:
            t = t.to(dtype)
        return t, patched

    def _take(self, device: torch.device) -> Staged | None:
        staged, self.staged = self.staged, None
        if staged is None or staged.device != device:
            return None
        if staged.ready is not None:
            current = torch.cuda.current_stream(device)
            current.wait_event(staged.ready)
            # the copies were allocated on the side stream: keep them alive for this stream's use
            staged.weight.record_stream(current)
            if staged.bias is not None:
                staged.bias.record_stream(current)
        return staged

    def copy_to(self, device: torch.device, side: torch.cuda.Stream | None) -> Staged:
        """Fresh copies of the source on ``device``; on ``side`` (a CUDA stream) when given."""
        src_w, src_b = (self.pinned.weight, self.pinned.bias) if self.pinned else (self.weight, self.bias)
        non_blocking = self.pinned is not None
        ring, slot = self.group.staging, None
        if ring is not None and self.pinned is None and device.type != "cpu" and src_w.device.type == "cpu":
            plain = src_w.plain() if isinstance(src_w, DeferredWeight) else src_w
            (host_w, src_b), slot = ring.stage([plain, src_b])  # through a pinned buffer, reused
            assert host_w is not None
            src_w = src_w._twin(host_w) if isinstance(src_w, DeferredWeight) else host_w
            non_blocking = True

        def fresh(t: Tensor | None) -> Tensor | None:
            # on the source's own device at the source's address residue, elsewhere a fresh device
            # block: what a resident layer computes with, so both give the same bits (alignment.py)
            if isinstance(t, DeferredWeight):  # copy the stored bytes, keep what they mean
                return t._twin(copy_for_compute(t.plain(), device, non_blocking=non_blocking))
            return None if t is None else copy_for_compute(t, device, non_blocking=non_blocking)

        if side is None:
            w = fresh(src_w)
            assert w is not None
            b = fresh(src_b)
            if ring is not None and slot is not None:
                ring.issued(slot, None)  # the buffer is free again once the current stream copied it
            return Staged(device, w, b)
        with torch.cuda.stream(side):
            w = fresh(src_w)
            assert w is not None
            b = fresh(src_b)
            ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
            ready.record(side)
            if ring is not None and slot is not None:
                ring.issued(slot, side)
        return Staged(device, w, b, ready)

    def release(self) -> None:
        """Drop the copy started ahead and the pinned copy."""
        self.staged = None
        self.pinned = None


def _ptrs(weight: Tensor, bias: Tensor | None) -> tuple[int, int]:
    return weight.data_ptr(), (bias.data_ptr() if bias is not None else 0)


# -- putting layers in and out of streaming mode ------------------------------------------------


def _layer(module: nn.Module, name: str) -> CastWeights:
    layer = module.get_submodule(name) if name else module
    if not isinstance(layer, CastWeights):
        raise TypeError(f"layer {name!r} ({type(layer).__name__}) is not a core.ops layer: it cannot stream")
    return layer


def streamable_layers(module: nn.Module) -> list[tuple[str, int]]:
    """``(name, bytes)`` of every op layer of ``module`` that has weights, in module order: what a
    partial-load plan chooses from."""
    return [
        (name, _nbytes(layer))
        for name, layer in module.named_modules()
        if isinstance(layer, CastWeights) and isinstance(getattr(layer, "weight", None), Tensor)
    ]


def plan_pinning(sizes: Iterable[tuple[str, int]], budget: int | None) -> frozenset[str]:
    """Which layers get pinned host copies: in order, each that still fits in ``budget`` bytes
    (None: no cap). Pure; the caller passes the pinned-memory cap left for this model."""
    chosen: list[str] = []
    used = 0
    for name, nbytes in sizes:
        if budget is None or used + nbytes <= budget:
            chosen.append(name)
            used += nbytes
    return frozenset(chosen)


def stream_layers(
    module: nn.Module,
    names: Sequence[str],
    device: torch.device | str,
    *,
    patch_fn: PatchFn | None = None,
    touches: Callable[[str], bool] | None = None,
    interrupt: InterruptCheck | None = None,
    pin: bool = False,
    pin_budget: int | None = None,
    prefetch: bool = True,
    staging: StagingRing | None = None,
) -> StreamedLayers:
    """Put the op layers ``names`` of ``module`` in streaming mode towards ``device``.

    Their parameters stay where they are; each forward copies them to the input's device, applies
    ``patch_fn`` (keys are ``f"{name}.weight"`` / ``".bias"``, so ``module`` is the patcher's model
    and must hold the *unpatched* weights of these layers) and casts; ``touches(key)`` says
    whether ``patch_fn`` changes a key (a layer it does not may take the fp8 matmul path).
    ``pin`` makes pinned host copies of CPU weights within ``pin_budget`` bytes (CUDA only).
    ``prefetch`` copies the next layer ahead: on a side stream on CUDA, synchronously elsewhere.
    ``staging`` (a :class:`core.ops.staging.StagingRing`) sends host weights through a few
    reused pinned buffers instead. Everything is checked before any layer changes;
    :func:`unstream_layers` undoes it."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if len(set(names)) != len(names):
        raise ValueError("each layer may be named once")
    layers = [(name, _layer(module, name)) for name in names]
    for name, layer in layers:
        if layer.stream is not None:
            raise ValueError(f"layer {name!r} is already streamed; unstream it first")
        weight = getattr(layer, "weight", None)
        if not isinstance(weight, Tensor) or weight.is_meta:
            raise ValueError(f"layer {name!r} has no loaded weight to stream")
    cuda = dev.type == "cuda"
    side = torch.cuda.Stream(dev) if cuda and prefetch else None  # type: ignore[no-untyped-call]
    group = StreamedLayers(dev, side, prefetch, staging)
    sizes = [
        (name, _nbytes(layer))
        for name, layer in layers
        if _param(layer).device.type == "cpu" and not isinstance(layer, nn.Embedding)  # tables stay put
    ]
    to_pin = plan_pinning(sizes, pin_budget) if pin and cuda else frozenset()
    for name, layer in layers:
        weight, bias = _param(layer), getattr(layer, "bias", None)
        host = None
        if name in to_pin:
            pinned_bias = None if bias is None else bias.detach().pin_memory()
            host = HostCopy(weight.detach().pin_memory(), pinned_bias)
        if isinstance(weight, DeferredWeight):
            weight.prepare(dev)  # an fp8 scale goes to the device now, not at every forward
        table = isinstance(layer, nn.Embedding)
        stream = LayerStream(
            name, weight, bias, dev, group, patch_fn, interrupt, host, table=table, touches=touches
        )
        group.layers[name] = stream
        layer.stream = stream
    return group


def _param(layer: CastWeights) -> Tensor:
    weight: Tensor = getattr(layer, "weight")  # noqa: B009 - set by the torch base class
    return weight


def _nbytes(layer: CastWeights) -> int:
    bias = getattr(layer, "bias", None)
    return _param(layer).nbytes + (bias.nbytes if isinstance(bias, Tensor) else 0)


def unstream_layers(module: nn.Module, names: Iterable[str]) -> int:
    """Take the named layers out of streaming mode (their pinned and prefetched copies are freed).
    Returns how many were streamed; names that were not are ignored."""
    n = 0
    for name in names:
        layer = _layer(module, name)
        stream = layer.stream
        if stream is None:
            continue
        stream.release()
        stream.group.forget(stream)
        del layer.stream  # back to the class default, None
        n += 1
    return n
