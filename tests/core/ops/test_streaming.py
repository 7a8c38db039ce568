"""Streamed layers: bit-identical to fully loaded, patches at cast time, stored weights untouched."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from core.errors import InterruptedByUser
from core.ops import default_ops as ops
from core.ops.layers import CastWeights, Embedding
from core.ops.streaming import (
    StreamedLayers,
    StreamStats,
    patch_fn_from,
    plan_pinning,
    stream_layers,
    streamable_layers,
    unstream_layers,
)
from core.patching.patcher import ModelPatcher
from tests.core.ops import MODELS, assert_untouched, lora_patches, one_thread, op_layers, snapshot

__all__ = ["one_thread"]  # the autouse fixture, imported so it applies here


def _subset(names: list[str], fraction: float, seed: int) -> list[str]:
    k = max(1, round(len(names) * fraction))
    return random.Random(seed).sample(names, k)


def _bytes(module: nn.Module, names: list[str]) -> int:
    sizes = dict(streamable_layers(module))
    return sum(sizes[n] for n in names)


@pytest.mark.parametrize("fraction", [0.3, 1.0])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_streamed_forward_is_bit_identical_to_loaded(model: str, fraction: float) -> None:
    tiny = MODELS[model]
    module = tiny.reference()
    loaded = tiny.forward(module)[0]
    names = _subset(op_layers(module), fraction, seed=len(model))
    before = snapshot(module)

    group = stream_layers(module, names, "cpu")
    outs = []
    for _ in range(3):
        outs.append(tiny.forward(module)[0])
        group.end_forward()

    assert all(torch.equal(out, loaded) for out in outs)
    assert_untouched(module, before)
    stats = group.stats
    assert stats.forwards == 3
    assert stats.casts == 3 * len(names)  # every streamed layer went through its stream
    assert stats.last_forward_bytes == stats.max_forward_bytes == _bytes(module, names)
    assert group.streamed_bytes == _bytes(module, names)
    assert sorted(group.order) == sorted(names)  # the run order was learned
    assert stats.prefetched >= 2 * len(names) - 1  # from the second forward on, copies come ahead


def test_each_forward_copies_the_source_into_fresh_tensors() -> None:
    tiny = MODELS["flux"]
    module = tiny.reference()
    names = op_layers(module)
    seen: list[tuple[str, Tensor]] = []

    def spy(key: str, base: Tensor) -> Tensor:
        seen.append((key, base))
        return base

    group = stream_layers(module, names, "cpu", patch_fn=spy)
    tiny.forward(module)
    params = dict(module.named_parameters())
    assert {k for k, _ in seen} == {k for k in params if k.rpartition(".")[0] in names}
    for key, base in seen:
        assert base.data_ptr() != params[key].data_ptr()  # a copy, not the stored tensor
        assert torch.equal(base, params[key])
    assert group.stats.patched == 0  # the spy changed nothing


@pytest.mark.parametrize("model", sorted(MODELS))
def test_streamed_with_patches_equals_baked_weights(model: str) -> None:
    tiny = MODELS[model]
    module = tiny.reference()
    plain = tiny.forward(module)[0]
    names = op_layers(module)
    patcher = ModelPatcher(module)
    patcher.add_patches("lora", lora_patches(module, names, seed=3))
    patcher.add_patches("more", lora_patches(module, names[::2], seed=4), strength=-0.7)

    patcher.apply()
    baked = tiny.forward(module)[0]
    patcher.unpatch()
    assert not torch.allclose(baked, plain, atol=1e-3)  # the LoRAs change the output

    before = snapshot(module)
    streamed = _subset(names, 0.5, seed=5)
    resident_keys = [k for k in patcher.patched_keys() if k.rpartition(".")[0] not in streamed]
    patcher.apply(resident_keys)  # a partial load: resident layers baked, streamed ones patched at cast
    group = stream_layers(module, streamed, "cpu", patch_fn=patch_fn_from(patcher.patched_weight))
    during = snapshot(module)
    out = tiny.forward(module)[0]
    assert torch.equal(out, baked)
    patched = {k.rpartition(".")[0] for k in patcher.patched_keys()}
    assert group.stats.patched == len(patched & set(streamed)) > 0
    assert_untouched(module, during)

    unstream_layers(module, streamed)
    patcher.unpatch()  # puts new Parameter objects around the original storage
    assert_untouched(module, before, same_objects=False)
    assert torch.equal(tiny.forward(module)[0], plain)


def test_strength_change_between_forwards_reaches_prefetched_layers() -> None:
    tiny = MODELS["flux"]
    module = tiny.reference()
    names = op_layers(module)
    patcher = ModelPatcher(module)
    patcher.add_patches("lora", lora_patches(module, names, seed=6))
    expected = {}
    for strength in (1.0, 0.25):
        patcher.set_strength("lora", strength)
        patcher.apply()
        expected[strength] = tiny.forward(module)[0]
        patcher.unpatch()

    group = stream_layers(module, names, "cpu", patch_fn=patch_fn_from(patcher.patched_weight))
    patcher.set_strength("lora", 1.0)
    assert torch.equal(tiny.forward(module)[0], expected[1.0])
    assert torch.equal(tiny.forward(module)[0], expected[1.0])
    patcher.set_strength("lora", 0.25)
    prefetched = group.stats.prefetched
    assert torch.equal(tiny.forward(module)[0], expected[0.25])
    assert group.stats.prefetched - prefetched == len(names)  # copies made before the change, patched after


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_interrupt_at_a_random_layer_leaves_weights_bit_identical(seed: int) -> None:
    tiny = MODELS["unet"] if seed == 0 else MODELS["flux"]
    module = tiny.reference()
    loaded = tiny.forward(module)[0]
    names = op_layers(module)
    patcher = ModelPatcher(module)
    patcher.add_patches("lora", lora_patches(module, names, seed=seed))
    patcher.apply()
    baked = tiny.forward(module)[0]
    patcher.unpatch()
    streamed = _subset(names, 0.6, seed=seed)
    patcher.apply([k for k in patcher.patched_keys() if k.rpartition(".")[0] not in streamed])
    before = snapshot(module)
    trip_at = random.Random(seed).randrange(1, len(streamed) + 1)
    calls = {"n": 0, "armed": True}

    def interrupt() -> None:
        calls["n"] += 1
        if calls["armed"] and calls["n"] == trip_at:
            raise InterruptedByUser("stopped", why="the user pressed stop")

    group = stream_layers(
        module, streamed, "cpu", patch_fn=patch_fn_from(patcher.patched_weight), interrupt=interrupt
    )
    with pytest.raises(InterruptedByUser):
        tiny.forward(module)
    assert calls["n"] == trip_at  # checked once per streamed layer, and nothing ran after the stop
    assert_untouched(module, before)

    calls["armed"] = False
    assert torch.equal(tiny.forward(module)[0], baked)  # nothing left over from the stopped forward
    group.drop_prefetched()
    unstream_layers(module, streamed)
    assert_untouched(module, before)
    patcher.unpatch()
    assert torch.equal(tiny.forward(module)[0], loaded)


def test_side_outputs_still_run_on_streamed_layers() -> None:
    tiny = MODELS["flux"]
    module = tiny.reference()
    names = op_layers(module)
    patcher = ModelPatcher(module)
    patcher.add_patches("lora", lora_patches(module, names, seed=8, bias_diffs=False))
    assert patcher.preview()  # nothing baked: every LoRA runs as a side path
    resident = tiny.forward(module)[0]

    stream_layers(module, names, "cpu")
    assert torch.equal(tiny.forward(module)[0], resident)
    patcher.unpatch()
    assert not torch.equal(tiny.forward(module)[0], resident)


class EveryOp(nn.Module):
    """One of each op layer, so each one's streamed forward is checked."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = ops.Embedding(10, 16)
        self.rms = ops.RMSNorm(16)
        self.ln = ops.LayerNorm(16)
        self.lin = ops.Linear(16, 16)
        self.c1 = ops.Conv1d(4, 4, 3, padding=1)
        self.c2 = ops.Conv2d(4, 8, 3, padding=1)
        self.c3 = ops.Conv3d(2, 2, 1)
        self.t1 = ops.ConvTranspose1d(4, 4, 2, stride=2)
        self.t2 = ops.ConvTranspose2d(8, 4, 2, stride=2)
        self.gn = ops.GroupNorm(2, 4)
        g = torch.Generator().manual_seed(0)
        for p in self.parameters():
            p.data = torch.randn(p.shape, generator=g)
            p.requires_grad_(False)

    def forward(self, ids: Tensor) -> Tensor:
        h = self.lin(self.ln(self.rms(self.embed(ids, out_dtype=torch.float32))))  # (2, 16, 16)
        h4 = h.reshape(2, 4, 4, 16)
        one = self.t1(self.c1(h4.reshape(2, 4, 64))).reshape(2, 4, 8, 16)
        two = self.gn(self.t2(self.c2(h4)))
        three = self.c3(h.reshape(2, 2, 8, 4, 4)).reshape(2, 4, 8, 8)
        return one.sum() + two.sum() + three.sum() + two.flatten()[:5]


def test_every_op_layer_streams() -> None:
    net = EveryOp()
    ids = torch.randint(0, 10, (2, 16), generator=torch.Generator().manual_seed(1))
    loaded = net(ids)
    names = op_layers(net)
    patches = {f"{n}.weight": (lambda w: w * 2) for n in ("rms", "embed", "t2")}
    group = stream_layers(net, names, "cpu", patch_fn=lambda key, w: patches[key](w) if key in patches else w)
    assert group.names == tuple(names) and len(names) == 10
    streamed = net(ids)
    assert group.stats.casts == 10 and group.stats.patched == 3
    unstream_layers(net, names)
    assert torch.equal(net(ids), loaded)
    with torch.no_grad():
        for n in ("rms", "embed", "t2"):
            net.get_submodule(n).weight.mul_(2)
    assert torch.equal(streamed, net(ids))


def test_streaming_mode_is_one_declared_slot() -> None:
    net = EveryOp()
    names = op_layers(net)
    attributes = {n: set(vars(net.get_submodule(n))) for n in names}
    group = stream_layers(net, names, "cpu")
    for name in names:
        layer = net.get_submodule(name)
        assert isinstance(layer, CastWeights)
        assert set(vars(layer)) - attributes[name] == {"stream"}  # nothing else bolted on
        assert layer.stream is group.layers[name]
        assert type(layer).stream is None  # the class default is untouched
    assert unstream_layers(net, names) == len(names)
    assert all("stream" not in vars(net.get_submodule(n)) for n in names)
    assert unstream_layers(net, names) == 0
    assert group.layers == {}


def test_stream_layers_checks_everything_before_changing_anything() -> None:
    net = EveryOp()
    net.register_module("plain", nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"not a core\.ops layer"):
        stream_layers(net, ["lin", "plain"], "cpu")
    assert net.lin.stream is None  # nothing was half done
    with pytest.raises(ValueError, match="once"):
        stream_layers(net, ["lin", "lin"], "cpu")
    with pytest.raises(AttributeError):
        stream_layers(net, ["nope"], "cpu")
    stream_layers(net, ["lin"], "cpu")
    with pytest.raises(ValueError, match="already streamed"):
        stream_layers(net, ["lin"], "cpu")
    affine_free = ops.LayerNorm(16, elementwise_affine=False)
    net.register_module("bare", affine_free)
    with pytest.raises(ValueError, match="no loaded weight"):
        stream_layers(net, ["bare"], "cpu")


def test_a_weight_replaced_while_streamed_is_refused() -> None:
    net = EveryOp()
    stream_layers(net, ["lin"], "cpu")
    x = torch.randn(3, 16)
    net.lin(x)
    net.lin.weight = nn.Parameter(torch.zeros(16, 16), requires_grad=False)
    with pytest.raises(RuntimeError, match="unstream_layers"):
        net.lin(x)


def test_fetch_gives_unpatched_copies_in_the_stored_dtype() -> None:
    layer = ops.Linear(16, 32)
    layer.weight = nn.Parameter(torch.randn(32, 16).to(torch.float8_e4m3fn), requires_grad=False)
    layer.bias = nn.Parameter(torch.randn(32), requires_grad=False)
    net = nn.Sequential(layer)
    group = stream_layers(net, ["0"], "cpu", patch_fn=lambda key, w: w + 1)
    assert layer.stream is not None
    w, b = layer.stream.fetch(layer.weight, layer.bias, torch.device("cpu"))
    assert w.dtype == torch.float8_e4m3fn and w.data_ptr() != layer.weight.data_ptr()
    assert b is not None and torch.equal(w.float(), layer.weight.float()) and torch.equal(b, layer.bias)
    assert group.stats.casts == 1 and group.stats.patched == 0


def test_pinning_plan_respects_the_cap() -> None:
    sizes = [("a", 40), ("b", 30), ("c", 50), ("d", 20)]
    assert plan_pinning(sizes, 100) == {"a", "b", "d"}  # c does not fit after a and b; d does
    assert plan_pinning(sizes, 0) == frozenset()
    assert plan_pinning(sizes, None) == {"a", "b", "c", "d"}
    for budget in range(0, 150, 7):
        assert sum(n for name, n in sizes if name in plan_pinning(sizes, budget)) <= budget


def test_pinning_needs_cuda() -> None:
    net = EveryOp()
    group = stream_layers(net, op_layers(net), "cpu", pin=True, pin_budget=1 << 30)
    assert group.pinned_bytes == 0 and group.side_stream is None


def test_stats_close_a_forward_when_a_layer_runs_again() -> None:
    stats = StreamStats()
    assert stats.end_forward() == 0 and stats.forwards == 0
    net = EveryOp()
    ids = torch.zeros(2, 16, dtype=torch.long)
    group = stream_layers(net, op_layers(net), "cpu")
    # every layer's weights once, but only the looked-up rows of an embedding table
    per_forward = sum(
        min(ids.numel() * s.weight[0].nbytes, s.nbytes) if s.table else s.nbytes
        for s in group.layers.values()
    )
    net(ids)
    net(ids)  # no end_forward between: the repeat of the first layer closes the first forward
    assert group.stats.forwards == 1 and group.stats.current_forward_bytes == per_forward
    assert group.end_forward() == per_forward
    assert group.stats.mean_forward_bytes == per_forward and group.stats.bytes_total == 2 * per_forward


# -- on a CUDA device --------------------------------------------------------------------------


def _cuda_partial(fraction: float, **kwargs: Any) -> tuple[Tensor, Tensor, StreamedLayers]:
    tiny = MODELS["unet"]
    module = tiny.reference().to("cuda")
    x = torch.randn(2, 4, 8, 8, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    ctx = torch.randn(2, 5, 768, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    t = torch.tensor([10.0, 500.0], device="cuda")
    with torch.no_grad():
        loaded = module(x, t, ctx)
    names = _subset(op_layers(module), fraction, seed=11)
    for name in names:
        module.get_submodule(name).to("cpu")  # what a partial load leaves in RAM
    group = stream_layers(module, names, "cuda", **kwargs)
    with torch.no_grad():
        outs = [module(x, t, ctx) for _ in range(3)]
    torch.cuda.synchronize()
    for out in outs[1:]:  # prefetched copies (from the second forward on) give the same result
        torch.testing.assert_close(out, outs[0], rtol=1e-6, atol=1e-6)
    return loaded, outs[-1], group


@pytest.mark.gpu
def test_cuda_streamed_forward_equals_loaded_and_prefetches() -> None:
    loaded, streamed, group = _cuda_partial(0.5, pin=True)
    torch.testing.assert_close(streamed, loaded, rtol=1e-5, atol=1e-5)
    assert group.side_stream is not None
    assert group.stats.prefetched > 0


@pytest.mark.gpu
def test_cuda_pinned_copies_respect_the_cap() -> None:
    budget = 200_000
    _, _, group = _cuda_partial(1.0, pin=True, pin_budget=budget)
    assert 0 < group.pinned_bytes <= budget
    pinned = [s for s in group.layers.values() if s.pinned is not None]
    assert pinned and all(s.pinned is not None and s.pinned.weight.is_pinned() for s in pinned)
    assert all(not s.weight.is_pinned() for s in group.layers.values())


def test_a_streamed_embedding_table_stays_where_it_is_and_sends_only_its_rows() -> None:
    torch.manual_seed(0)
    table = Embedding(49408, 32)  # CLIP's vocabulary: a 6 MB table here, 76 MB in CLIP-L
    table.weight.data.normal_()
    ids = torch.tensor([[49406, 320, 1125, 49407]])
    resident = table(ids)
    group = stream_layers(table, [""], "cpu")
    try:
        streamed = table(ids)
        assert torch.equal(streamed, resident)
        assert group.stats.bytes_total == ids.numel() * 32 * 4  # the four rows, not the table
        group.end_forward()
        table(ids)
        assert group.layers[""].staged is None  # never prefetched: a table is not sent ahead
    finally:
        unstream_layers(table, [""])
