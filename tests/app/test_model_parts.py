"""A Z-Image diffusion model loaded alone: the Generate panel's model picker says it also needs
its text encoder (qwen3-4b, from the family's record) and a VAE, and offers the library's files
for them, loaded with one click (as for Flux's CLIP and T5)."""

from __future__ import annotations

from pathlib import Path

from app.gui.model_picker import ModelPicker
from core.archs.catalog import missing_parts
from core.library import InspectCache
from core.session.library import Library
from tests.fixtures.layouts_diffusion import z_image
from tests.fixtures.layouts_encoders import llm_decoder, vae_kl
from tests.fixtures.st_files import write_sparse


def _folder(root: Path) -> Path:
    m = root / "models"
    write_sparse(m / "diffusion_models" / "z_image_turbo_bf16.safetensors", z_image(), dtype="BF16")
    qwen3_4b = llm_decoder(
        hidden=2560, layers=36, heads=32, kv_heads=8, head_dim=128, ffn=9728, vocab=151936, qk_norm=True
    )
    write_sparse(m / "text_encoders" / "qwen_3_4b.safetensors", qwen3_4b, dtype="BF16")
    write_sparse(m / "vae" / "ae.safetensors", vae_kl(16, quant_conv=False), dtype="BF16")
    return m


def test_the_picker_offers_what_a_new_family_still_needs(qtbot, tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    entries = list(Library(InspectCache(None)).scan([str(folder)], lambda p: None, lambda: None))
    done = {e.path.name: e for e in entries if e.status == "ok"}
    assert done["qwen_3_4b.safetensors"].family == "qwen3-4b" and done["ae.safetensors"].family == "vae-flux"
    picker = ModelPicker()
    qtbot.addWidget(picker)
    picker.add_entries(entries)
    picker.show()
    model = folder / "diffusion_models" / "z_image_turbo_bf16.safetensors"
    picker.set_loaded(model)
    picker.set_missing(missing_parts("z-image", {("diffusion_model", "z-image")}))
    assert picker.needs.isVisible() and "qwen3-4b" in picker.needs.text() and "VAE" in picker.needs.text()
    assert picker.load_parts.isVisible() and "qwen_3_4b" in picker.load_parts.text()
    asked: list[Path] = []
    picker.load_requested.connect(asked.append)
    picker.load_parts.click()
    assert asked == [folder / "text_encoders" / "qwen_3_4b.safetensors", folder / "vae" / "ae.safetensors"]
    # both loaded: nothing more is asked for
    loaded = {("diffusion_model", "z-image"), ("text_encoder", "qwen3-4b"), ("vae", "vae-flux")}
    picker.set_missing(missing_parts("z-image", loaded))
    assert not picker.needs.isVisible() and not picker.load_parts.isVisible()
    # a part the library does not have is named, with what to do
    picker.set_missing(missing_parts("lumina2", {("diffusion_model", "lumina2"), ("vae", "vae-flux")}))
    assert "gemma2-2b" in picker.needs.text() and "Not in your library" in picker.needs.text()
    assert not picker.load_parts.isVisible()
