"""The fit estimate counts a quantized file's real bytes (GGUF blocks, fp8 values), the same bytes
the loaded model holds and the memory manager places."""

from __future__ import annotations

from pathlib import Path

from core.library import LibraryIndex, ModelRoot
from core.loading.loader import load_diffusion_model
from core.memory.fit import component_fits, estimate_fit
from tests.fixtures.fp8_scaled import write_scaled_fp8
from tests.fixtures.gguf_quant import write_comfy_gguf
from tests.fixtures.tiny_models import TINY_FLUX


def test_fit_counts_quantized_bytes(tmp_path: Path) -> None:
    state = TINY_FLUX.file_state()
    write_comfy_gguf(tmp_path / "flux-Q4_K.gguf", "flux", state, "Q4_K")
    write_scaled_fp8(tmp_path / "flux_fp8_scaled.safetensors", state)
    index = LibraryIndex([ModelRoot(tmp_path, "diffusion_models", "folder")])
    entries = {e.path.name: e for e in index.scan() if e.status == "ok"}
    fp16_bytes = sum(t.numel() * 2 for t in state.values())
    for name in ("flux-Q4_K.gguf", "flux_fp8_scaled.safetensors"):
        entry = entries[name]
        (comp,) = component_fits(entry)
        held = load_diffusion_model(tmp_path / name).nbytes
        # the header's bytes are what the model holds (scaled fp8: plus its 4-byte scales)
        assert held <= comp.bytes <= held + 4 * 200, (name, comp.bytes, held)
        assert comp.bytes < 0.6 * fp16_bytes
        fit = estimate_fit(entry, comp.bytes, where="RAM", on_gpu=False, ram_available=0)
        assert fit.verdict == "fits" and fit.total == comp.bytes
        # choosing fp16 counts the dequantized size (scaled fp8: the scales counted as weights too)
        dense = sum(t.numel() for t in state.values()) * 2
        assert dense <= component_fits(entry, "fp16")[0].bytes <= dense + 2 * 200
