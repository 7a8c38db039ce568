"""ComfyUI scaled fp8 files (``*_fp8_scaled`` and the newer ``comfy_quant`` layout) load with their
weights still fp8 (the file's bytes, memory-mapped) and compute exactly what the same network
computes with ``q.to(dtype) * scale`` baked in: resident, streamed, placed by the memory manager,
with and without a LoRA (patched in the compute dtype, never rounded back to fp8)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import Tensor, nn

from core.errors import LoadoutError
from core.files import read_tensor_index
from core.loading.check import check_file
from core.loading.loader import (
    LoadedComponent,
    inspect_for_loading,
    load_checkpoint,
    load_diffusion_model,
    load_text_encoder,
)
from core.memory.manager import MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import PlanSettings
from core.models.state import get_tensor
from core.ops.fp8 import Fp8Linear
from core.ops.streaming import patch_fn_from, stream_layers, streamable_layers, unstream_layers
from core.patching.patcher import ModelPatcher
from core.quant.fp8_weight import ScaledFp8Weight
from tests.core.ops import lora_patches, op_layers
from tests.core.quant.baking import baked, same
from tests.fixtures.fp8_scaled import E4M3, Written, quantize, write_scaled_fp8
from tests.fixtures.tiny_models import TINY_CLIP_L, TINY_FLUX, TINY_MMDIT, TINY_T5, TINY_UNET_SDXL, Tiny

# (tiny network, how ComfyUI laid the file out, input scales)
CASES = {
    "flux-scaled_fp8": (TINY_FLUX, "scaled_fp8", False),
    "flux-input_scales": (TINY_FLUX, "scaled_fp8", True),
    "sd3-comfy_quant": (TINY_MMDIT, "comfy_quant", False),
    "sdxl-metadata": (TINY_UNET_SDXL, "metadata", True),
    "t5-scaled_fp8": (TINY_T5, "scaled_fp8", False),
    "clip_l-scaled_fp8": (TINY_CLIP_L, "scaled_fp8", False),
}


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Written]]:
    d = tmp_path_factory.mktemp("fp8")
    out = {}
    for name, (tiny, style, inputs) in CASES.items():
        path = d / f"{name}.safetensors"
        out[name] = (path, write_scaled_fp8(path, tiny.file_state(), style=style, input_scales=inputs))
    return out


def _load(tiny: Tiny, path: Path) -> LoadedComponent:
    return load_text_encoder(path) if tiny.role == "text_encoder" else load_diffusion_model(path)


def _baked(tiny: Tiny, loaded: LoadedComponent, written: Written) -> nn.Module:
    """The network with ``q.to(dtype) * scale.to(dtype)`` in place of every scaled weight, in the
    dtype the network computes in (the text encoders: their embedding's bf16; the diffusion
    models: the fp32 input's)."""
    return baked(
        tiny, loaded, written.values(torch.bfloat16 if tiny.role == "text_encoder" else torch.float32)
    )


@pytest.mark.parametrize("case", list(CASES))
def test_loads_fp8_and_matches_the_baked_model(case: str, written: dict) -> None:
    tiny, _, inputs = CASES[case]
    path, reference = written[case]
    _, det = inspect_for_loading(path)
    assert det.family == tiny.family
    loaded = _load(tiny, path)
    state = loaded.module.state_dict(keep_vars=True)
    scaled = {k: v for k, v in state.items() if isinstance(v, ScaledFp8Weight)}
    assert scaled and all(v.dtype == E4M3 and v.scale is not None for v in scaled.values())
    assert all((v.input_scale is not None) == inputs for v in scaled.values())
    # memory held: the file's tensor bytes minus the folded scale/marker/config tensors
    index = read_tensor_index(path)
    folded = {
        k for k in index.tensors if k.endswith(("scale_weight", "scale_input", "_scale", "comfy_quant"))
    }
    assert loaded.nbytes == sum(
        t.nbytes for k, t in index.tensors.items() if k not in folded and k != "scaled_fp8"
    )
    assert sum(v.nbytes for v in scaled.values()) == sum(v.numel() for v in scaled.values())  # 1 byte each
    baked = _baked(tiny, loaded, reference)
    assert same(tiny.forward(loaded.module), tiny.forward(baked))
    assert check_file(path)["ok"]


@pytest.mark.parametrize("case", ["flux-scaled_fp8", "sd3-comfy_quant", "t5-scaled_fp8"])
def test_streamed_layers_copy_fp8_bytes_and_match(case: str, written: dict) -> None:
    tiny, _, _ = CASES[case]
    path, reference = written[case]
    loaded = _load(tiny, path)
    expected = tiny.forward(_baked(tiny, loaded, reference))
    names = [n for n, _ in streamable_layers(loaded.module)]
    group = stream_layers(loaded.module, names, "cpu")
    try:
        assert same(tiny.forward(loaded.module), expected)
        group.end_forward()
        # the stored (fp8) bytes travel, never an upcast copy; an embedding table sends only its rows
        whole = sum(nb for _, nb in streamable_layers(loaded.module))
        tables = sum(s.nbytes for s in group.layers.values() if s.table)
        assert whole - tables <= group.stats.last_forward_bytes <= whole
    finally:
        unstream_layers(loaded.module, names)


@pytest.mark.parametrize("case", ["flux-scaled_fp8", "sdxl-metadata", "t5-scaled_fp8"])
def test_lora_on_scaled_layers_baked_streamed_and_placed(case: str, written: dict) -> None:
    tiny, _, _ = CASES[case]
    path, reference = written[case]
    loaded = _load(tiny, path)
    baked = _baked(tiny, loaded, reference)
    patches = lora_patches(baked, op_layers(baked)[::2], seed=3, scale=0.02)
    assert any(isinstance(get_tensor(loaded.module, k), ScaledFp8Weight) for k in patches)
    ref_patcher = ModelPatcher(baked)
    ref_patcher.add_patches("lora", patches, 0.7)
    plain = tiny.forward(baked)
    ref_patcher.apply()
    expected = tiny.forward(baked)
    assert not same(plain, expected)

    # baked on the CPU: the same fp8 bytes carry the stack, applied after the scaled upcast
    patcher = ModelPatcher(loaded.module)
    patcher.add_patches("lora", patches, 0.7)
    patcher.apply()
    for key in patches:
        if isinstance(patcher.original(key), ScaledFp8Weight):
            w = get_tensor(loaded.module, key)
            assert isinstance(w, ScaledFp8Weight) and w.patch is not None and w.dtype == E4M3
            assert w.data_ptr() == patcher.original(key).data_ptr()
    assert same(tiny.forward(loaded.module), expected)
    patcher.unpatch()
    assert same(tiny.forward(loaded.module), plain)

    # streamed, the stack applied at cast time
    names = [n for n, _ in streamable_layers(loaded.module)]
    stream_layers(loaded.module, names, "cpu", patch_fn=patch_fn_from(patcher.patched_weight))
    try:
        assert same(tiny.forward(loaded.module), expected)
    finally:
        unstream_layers(loaded.module, names)

    # placed by the memory manager, partly resident
    mover = TorchMover()
    mover.use_patcher(patcher)
    settings = PlanSettings(vram_state="normal", reserve_bytes=0, min_inference_bytes=0)
    manager = MemoryManager(lambda: int(loaded.nbytes * 0.5), mover, settings=settings, device="cpu")
    manager.register(patcher, "unet")
    manager.load_models([patcher]).raise_if_refused()
    entry = manager.register(patcher)
    assert entry.streaming and entry.loaded_bytes <= loaded.nbytes
    assert same(tiny.forward(loaded.module), expected)
    manager.unload_all()
    assert same(tiny.forward(loaded.module), plain)


def test_a_scaled_checkpoint_loads_every_component(tmp_path: Path) -> None:
    """An all-in-one file with ``model.diffusion_model.scaled_fp8``: the marker and scales under
    the prefix are folded, the other components load as they are."""
    from tests.fixtures.tiny_models import TINY_VAE_16

    path = tmp_path / "flux_fp8_scaled.safetensors"
    ref = write_scaled_fp8(
        tmp_path / "part.safetensors", TINY_FLUX.file_state(), prefix="model.diffusion_model."
    )
    part = read_tensor_index(tmp_path / "part.safetensors")
    from safetensors import safe_open

    tensors = {}
    with safe_open(str(tmp_path / "part.safetensors"), "pt") as f:
        for k in part.tensors:
            tensors[k] = f.get_tensor(k)
    tensors.update({f"vae.{k}": v for k, v in TINY_VAE_16.file_state().items()})
    save_file(tensors, str(path))
    bundle = load_checkpoint(path)
    assert bundle.diffusion_model is not None and bundle.vae is not None
    assert not any(k.endswith(("scale_weight", "scaled_fp8")) for k in bundle.extras)
    baked = _baked(TINY_FLUX, bundle.diffusion_model, ref)
    assert same(TINY_FLUX.forward(bundle.diffusion_model.module), TINY_FLUX.forward(baked))


def test_markers_and_records_set_fp8_matmul_and_to_dtype_gives_values(tmp_path: Path) -> None:
    state = TINY_FLUX.file_state()
    for style in ("scaled_fp8", "comfy_quant"):
        path = tmp_path / f"{style}.safetensors"
        ref = write_scaled_fp8(path, state, style=style, full_precision=True)
        loaded = load_diffusion_model(path)
        scaled = [
            (k, v)
            for k, v in loaded.module.state_dict(keep_vars=True).items()
            if isinstance(v, ScaledFp8Weight)
        ]
        assert scaled and not any(v.fp8_matmul for _, v in scaled)
        key, w = scaled[0]
        assert torch.equal(w.to(torch.float32), ref.values()[key])  # .to(dtype): the weight's values
        bf = w.to(torch.bfloat16)  # ComfyUI's order: q.to(dtype) * scale.to(dtype)
        assert torch.equal(bf, w.plain().to(torch.bfloat16) * w.scale.to(torch.bfloat16))
        assert type(w.to("cpu")) is ScaledFp8Weight and w.detach().scale is w.scale


def _write(path: Path, tensors: dict[str, Tensor], metadata: dict[str, str] | None = None) -> Path:
    save_file(tensors, str(path), metadata=metadata)
    return path


def test_unsupported_quantizations_are_refused_with_a_message(tmp_path: Path) -> None:
    state = dict(TINY_FLUX.file_state())
    key = next(k for k in state if k.endswith(".weight") and state[k].ndim == 2)
    layer = key[: -len(".weight")]
    # nvfp4: packed uint8 values with a block scale and a tensor scale
    nv = {k: v.to(torch.bfloat16) for k, v in state.items()}
    nv[key] = torch.zeros(state[key].shape[0], state[key].shape[1] // 2, dtype=torch.uint8)
    nv[layer + ".weight_scale"] = torch.ones(1)
    nv[layer + ".weight_scale_2"] = torch.ones(())
    nv[layer + ".comfy_quant"] = torch.tensor(list(b'{"format": "nvfp4"}'), dtype=torch.uint8)
    with pytest.raises(LoadoutError) as err:
        load_diffusion_model(_write(tmp_path / "nv.safetensors", nv))
    assert err.value.code == "unsupported_format" and "nvfp4" in err.value.why
    # a format named in _quantization_metadata that is not fp8
    q, s = quantize(state[key])
    meta = {"_quantization_metadata": json.dumps({"layers": {layer: {"format": "int8_tensorwise"}}})}
    mixed = {k: v.to(torch.bfloat16) for k, v in state.items()}
    mixed[key], mixed[layer + ".weight_scale"] = q, s
    with pytest.raises(LoadoutError) as err:
        load_diffusion_model(_write(tmp_path / "int8.safetensors", mixed, meta))
    assert err.value.code == "unsupported_format" and "int8_tensorwise" in err.value.why
    # a per-channel scale
    per_row = dict(mixed)
    per_row[layer + ".weight_scale"] = torch.ones(q.shape[0])
    with pytest.raises(LoadoutError) as err:
        load_diffusion_model(_write(tmp_path / "rows.safetensors", per_row))
    assert err.value.code == "unsupported_format"
    # a comfy_quant record that is not JSON
    broken = dict(mixed)
    broken[layer + ".comfy_quant"] = torch.tensor(list(b"\xff{"), dtype=torch.uint8)
    with pytest.raises(LoadoutError) as err:
        load_diffusion_model(_write(tmp_path / "broken.safetensors", broken))
    assert err.value.code == "invalid_file"


def test_fp8_linear_falls_back_to_the_scaled_upcast_without_fp8_matmul() -> None:
    g = torch.Generator().manual_seed(0)
    q, s = quantize(torch.randn(48, 32, generator=g))
    layer = Fp8Linear(32, 48, bias=False, device="meta")
    layer.weight = nn.Parameter(ScaledFp8Weight(q, s), requires_grad=False)
    x = torch.randn(5, 32, generator=g)
    assert torch.equal(layer(x), x @ (q.float() * s).t())


@pytest.mark.gpu
@pytest.mark.parametrize("input_scale", [None, 0.5])
def test_scaled_mm_applies_weight_and_input_scales_on_cuda(input_scale: float | None) -> None:
    from core.ops.fp8 import device_has_fp8_matmul, scaled_mm_linear

    if not device_has_fp8_matmul(torch.device("cuda")):
        pytest.skip("this GPU has no fp8 matmul (needs compute capability 8.9+)")
    g = torch.Generator().manual_seed(1)
    q, s = quantize(torch.randn(64, 128, generator=g))
    x = torch.randn(3, 7, 128, generator=g).to("cuda", torch.bfloat16)
    inp = None if input_scale is None else torch.tensor(input_scale)
    layer = Fp8Linear(128, 64, bias=True, device="meta")
    layer.weight = nn.Parameter(ScaledFp8Weight(q, s, inp).to("cuda"), requires_grad=False)
    layer.bias = nn.Parameter(torch.randn(64, generator=g).to("cuda"), requires_grad=False)
    out = layer(x)
    direct = scaled_mm_linear(x, q.cuda(), layer.bias, s, inp)
    assert torch.equal(out, direct)
    upcast = torch.nn.functional.linear(x.float(), q.cuda().float() * s.cuda(), layer.bias.float())
    assert torch.allclose(out.float(), upcast, rtol=0.1, atol=0.1 * upcast.abs().max().item())


def test_saving_scaled_weights_needs_a_dtype_and_writes_the_values(tmp_path: Path, written: dict) -> None:
    from core.files.safetensors import SafetensorsFile
    from core.loading.loader import ModelBundle
    from core.loading.save import save_checkpoint

    path, ref = written["flux-scaled_fp8"]
    loaded = load_diffusion_model(path)
    _, det = inspect_for_loading(path)
    bundle = ModelBundle(path, det, {}, diffusion_model=loaded)
    with pytest.raises(LoadoutError) as err:
        save_checkpoint(bundle, tmp_path / "out.safetensors")
    assert err.value.code == "quantized_source" and "scaled fp8" in err.value.message
    assert not (tmp_path / "out.safetensors").exists()
    out = save_checkpoint(bundle, tmp_path / "out.safetensors", dtype=torch.float16)
    f = SafetensorsFile(out)
    for key, want in ref.values(torch.float32).items():
        assert torch.equal(f.tensor(key), want.to(torch.float16)), key
    assert not any(k.endswith(("scale_weight", "scaled_fp8")) for k in read_tensor_index(out).tensors)


def test_inspect_reports_fp8_storage_in_json_and_text(written: dict) -> None:
    from app.commands.inspect_cmd import format_table
    from core.inspect import inspect_file

    path, _ = written["flux-scaled_fp8"]
    result = inspect_file(path)
    record = result.to_json()
    assert record["variant"] == "fp8-scaled"
    (q,) = record["metadata"]["loadout.quantization"].values()
    assert q["types"].startswith("F8_E4M3 (") and 8.0 <= q["bits_per_weight"] < 9.0
    assert "quant     F8_E4M3 (" in format_table([result])
