"""GGUF diffusion models written with the ``gguf`` package as ComfyUI-GGUF writes them load with
their weights still quantized (file bytes, memory-mapped), and compute exactly what the same
network computes with the dequantized weights baked in: resident, streamed, placed by the memory
manager, with and without a LoRA."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import Tensor

from core.files import read_tensor_index
from core.loading.loader import load_diffusion_model
from core.memory.manager import MemoryManager
from core.memory.mover import TorchMover
from core.memory.planning import PlanSettings
from core.models.state import get_tensor
from core.ops.streaming import patch_fn_from, stream_layers, streamable_layers, unstream_layers
from core.patching.patcher import ModelPatcher
from core.quant.tensor import QuantizedWeight
from tests.core.ops import lora_patches, op_layers
from tests.core.quant.baking import baked as bake_reference
from tests.core.quant.baking import same
from tests.fixtures.gguf_quant import write_comfy_gguf
from tests.fixtures.placing import room_to_stream
from tests.fixtures.tiny_models import TINY_FLUX, TINY_UNET_SD1, TINY_UNET_SDXL

# (tiny network, general.architecture, main quant type) as ComfyUI-GGUF names them
CASES = {
    "flux-Q8_0": (TINY_FLUX, "flux", "Q8_0"),
    "flux-Q4_K": (TINY_FLUX, "flux", "Q4_K"),
    "sdxl-Q4_K": (TINY_UNET_SDXL, "sdxl", "Q4_K"),
    "sdxl-Q6_K": (TINY_UNET_SDXL, "sdxl", "Q6_K"),
    "sd1-Q5_1": (TINY_UNET_SD1, "sd1", "Q5_1"),
    "sd1-Q4_0": (TINY_UNET_SD1, "sd1", "Q4_0"),
}


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def written(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Path, dict[str, Tensor], dict[str, str]]]:
    d = tmp_path_factory.mktemp("gguf")
    out = {}
    for name, (tiny, arch, qtype) in CASES.items():
        out[name] = write_comfy_gguf(d / f"{name}.gguf", arch, tiny.file_state(), qtype)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_loads_quantized_and_matches_the_baked_model(case: str, written: dict) -> None:
    tiny, arch, qtype = CASES[case]
    path, reference, types = written[case]
    loaded = load_diffusion_model(path)
    assert loaded.family == tiny.family
    state = loaded.module.state_dict(keep_vars=True)
    quantized = {k: v for k, v in state.items() if isinstance(v, QuantizedWeight)}
    assert quantized and {v.qtype for v in quantized.values()} == {t for t in types.values() if t[0] == "Q"}
    assert any(v.qtype == qtype for v in quantized.values())
    if arch != "flux":  # UNet conv kernels were stored reshaped with comfy.gguf.orig_shape
        assert any(len(v.qshape) == 4 for v in quantized.values())
    # memory held: the file's tensor bytes, not fp16's
    index = read_tensor_index(path)
    assert loaded.nbytes == sum(t.nbytes for t in index.tensors.values())
    dense = sum(v.logical_numel for v in quantized.values()) * 2
    assert sum(v.nbytes for v in quantized.values()) < dense
    baked = bake_reference(tiny, loaded, reference)
    assert same(tiny.forward(loaded.module), tiny.forward(baked))


@pytest.mark.parametrize("case", ["flux-Q4_K", "sdxl-Q4_K", "sd1-Q5_1"])
def test_streamed_layers_copy_quantized_bytes_and_match(case: str, written: dict) -> None:
    tiny, _, _ = CASES[case]
    path, reference, _ = written[case]
    loaded = load_diffusion_model(path)
    baked = bake_reference(tiny, loaded, reference)
    expected = tiny.forward(baked)
    names = [n for n, _ in streamable_layers(loaded.module)]
    group = stream_layers(loaded.module, names, "cpu")
    try:
        assert same(tiny.forward(loaded.module), expected)
        group.end_forward()
        quantized_bytes = sum(nb for n, nb in streamable_layers(loaded.module))
        assert (
            group.stats.last_forward_bytes
            <= quantized_bytes
            < sum(t.numel() * 2 for n, _ in streamable_layers(baked) for t in [baked.get_submodule(n).weight])
        )
    finally:
        unstream_layers(loaded.module, names)


@pytest.mark.parametrize("case", ["flux-Q4_K", "sdxl-Q6_K", "sd1-Q4_0"])
def test_lora_on_quantized_layers_baked_and_streamed(case: str, written: dict) -> None:
    tiny, _, _ = CASES[case]
    path, reference, _ = written[case]
    loaded = load_diffusion_model(path)
    baked = bake_reference(tiny, loaded, reference)
    patches = lora_patches(baked, op_layers(baked)[::2], seed=3)
    assert any(isinstance(get_tensor(loaded.module, k), QuantizedWeight) for k in patches)

    ref_patcher = ModelPatcher(baked)
    ref_patcher.add_patches("lora", patches, 0.7)
    ref_patcher.apply()
    expected = tiny.forward(baked)

    # the CPU bake: a quantized weight gets the stack to apply per forward, never a dense copy
    patcher = ModelPatcher(loaded.module)
    patcher.add_patches("lora", patches, 0.7)
    patcher.apply()
    for key in patches:
        w = get_tensor(loaded.module, key)
        if isinstance(patcher.original(key), QuantizedWeight):
            assert isinstance(w, QuantizedWeight) and w.patch is not None
            assert w.data_ptr() == patcher.original(key).data_ptr()  # the same file bytes
    assert same(tiny.forward(loaded.module), expected)
    assert not same(
        tiny.forward(loaded.module), tiny.forward(bake_reference(tiny, load_diffusion_model(path), reference))
    )

    # unpatched again, then streamed with the stack applied at cast time
    patcher.set_enabled("lora", False)
    patcher.apply()
    assert all(
        get_tensor(loaded.module, k).patch is None
        for k in patches
        if isinstance(get_tensor(loaded.module, k), QuantizedWeight)
    )
    patcher.set_enabled("lora", True)
    names = [n for n, _ in streamable_layers(loaded.module)]
    stream_layers(loaded.module, names, "cpu", patch_fn=patch_fn_from(patcher.patched_weight))
    try:
        assert same(tiny.forward(loaded.module), expected)
    finally:
        unstream_layers(loaded.module, names)


@pytest.mark.parametrize("fraction", [4.0, 0.4])
def test_memory_manager_places_quantized_bytes(fraction: float, written: dict) -> None:
    tiny, _, _ = CASES["sdxl-Q4_K"]
    path, reference, _ = written["sdxl-Q4_K"]
    loaded = load_diffusion_model(path)
    baked = bake_reference(tiny, loaded, reference)
    patches = lora_patches(baked, op_layers(baked)[1::3], seed=5)
    ref_patcher = ModelPatcher(baked)
    ref_patcher.add_patches("lora", patches, -0.6)
    ref_patcher.apply()
    expected = tiny.forward(baked)

    patcher = ModelPatcher(loaded.module)
    patcher.add_patches("lora", patches, -0.6)
    mover = TorchMover()
    mover.use_patcher(patcher)
    state, free = room_to_stream(loaded.module, fraction)
    settings = PlanSettings(vram_state=state, reserve_bytes=0, min_inference_bytes=0)
    manager = MemoryManager(lambda: free, mover, settings=settings, device="cpu")
    manager.register(patcher, "unet")
    manager.load_models([patcher]).raise_if_refused()
    entry = manager.register(patcher)
    assert entry.streaming == (fraction < 1.0)
    assert entry.loaded_bytes <= loaded.nbytes  # counted in quantized bytes
    assert same(tiny.forward(loaded.module), expected)
    manager.unload_all()
    assert all(
        isinstance(get_tensor(loaded.module, k), QuantizedWeight)
        for k in patches
        if "weight" in k and get_tensor(loaded.module, k).dtype == torch.uint8
    )


def test_inspect_reports_the_quantization_per_component(written: dict) -> None:
    from core.inspect import inspect_file

    path, _, _ = written["sdxl-Q4_K"]
    info = inspect_file(path).to_json()["metadata"]["loadout.quantization"]["diffusion_model"]
    index = read_tensor_index(path)
    assert info["bytes"] == sum(t.nbytes for t in index.tensors.values())
    assert info["types"].startswith("Q4_K (") and "Q8_0 (" in info["types"]
    assert 4.5 < info["bits_per_weight"] < 8.5


def test_saving_quantized_weights_needs_a_dtype_and_writes_a_dequantized_copy(
    tmp_path: Path, written: dict
) -> None:
    from core.errors import LoadoutError
    from core.files.safetensors import SafetensorsFile
    from core.loading.loader import ModelBundle, inspect_for_loading
    from core.loading.save import save_checkpoint

    path, reference, _ = written["sd1-Q4_0"]
    loaded = load_diffusion_model(path)
    _, det = inspect_for_loading(path)
    bundle = ModelBundle(path, det, {}, diffusion_model=loaded)
    with pytest.raises(LoadoutError) as err:
        save_checkpoint(bundle, tmp_path / "out.safetensors")
    assert err.value.code == "quantized_source" and "output dtype" in err.value.fix
    assert not (tmp_path / "out.safetensors").exists()
    out = save_checkpoint(bundle, tmp_path / "out.safetensors", dtype=torch.float32)
    f = SafetensorsFile(out)
    for key, want in reference.items():
        assert torch.equal(f.tensor(key), want.to(torch.float32)), key
