"""Inspect with structures remembered: the same JSON as with nothing remembered, file by file.

Files here share a structure but differ in what only names and metadata decide (which SD a VAE
is for, SD2 v-prediction, a LoRA's base family from kohya metadata), so a memo that kept a
name- or metadata-derived fact would give one file another file's answer.
"""

from __future__ import annotations

from pathlib import Path

from core import inspect as inspect_mod
from core.inspect import clear_caches, inspect_file
from tests.fixtures import layouts_diffusion as ld
from tests.fixtures.diffusion_layouts_components import kl_vae
from tests.fixtures.layouts_lora import lora_layout, unet_attention_layers
from tests.fixtures.st_files import write_sparse

FILES: list[tuple[str, str, dict[str, str]]] = [
    # (layout, file name, metadata)
    ("vae", "sdxl_vae.safetensors", {}),
    ("vae", "sd15_vae.safetensors", {}),
    ("vae", "plain_vae.safetensors", {}),
    ("vae", "vae_meta.safetensors", {"modelspec.architecture": "stable-diffusion-xl-v1-base/vae"}),
    ("sd2", "sd2_768_v.safetensors", {}),
    ("sd2", "sd2_base.safetensors", {}),
    ("sd2", "some_model.safetensors", {"modelspec.prediction_type": "v"}),
    ("lora", "style_lora.safetensors", {}),
    ("lora", "style_lora_v1.safetensors", {"ss_base_model_version": "sd_v1"}),
    ("lora", "style_lora_xl.safetensors", {"ss_base_model_version": "sdxl_base_v1-0"}),
    ("lora", "sdxl_named_lora.safetensors", {"ss_sd_model_name": "sd_xl_base_1.0.safetensors"}),
    ("sd1", "a_sd15_checkpoint.safetensors", {"modelspec.title": "A"}),
    ("sd1", "sdxl_misnamed.safetensors", {"modelspec.title": "B longer title"}),
]

LAYOUTS = {
    "vae": kl_vae,
    "sd2": ld.sd2_checkpoint,
    "lora": lambda: lora_layout(unet_attention_layers("sd1"), "kohya", rank=8),
    "sd1": ld.sd1_checkpoint,
}


def test_remembered_structures_change_no_answer(tmp_path: Path) -> None:
    layouts = {k: f() for k, f in LAYOUTS.items()}
    paths = []
    for layout, name, meta in FILES:
        p = tmp_path / name
        write_sparse(p, layouts[layout], metadata={"modelspec.title": name, **meta})
        paths.append(p)
    fresh = []
    for p in paths:
        clear_caches()
        fresh.append(inspect_file(p).to_json())
    clear_caches()
    warm = [inspect_file(p).to_json() for p in paths]  # each layout's later files hit the memo
    assert inspect_mod._memo_of.cache_info().currsize == len(LAYOUTS)
    assert warm == fresh
    assert [inspect_file(p).to_json() for p in reversed(paths)] == fresh[::-1]
    # the fixtures do make names and metadata matter
    variants = {(r["kind"], r["family"], r["variant"]) for r in fresh}
    assert len(variants) >= 5, variants
