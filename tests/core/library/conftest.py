"""Fake installs with real (sparse) model files, and an inspector that counts its reads."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from core.inspect import InspectResult, inspect_file
from tests.fixtures import layouts_diffusion as ld
from tests.fixtures.layouts_encoders import clip_l_hf
from tests.fixtures.layouts_lora import lora_layout, unet_attention_layers
from tests.fixtures.st_files import write_sparse


def tiny_lora(path: Path, family: str = "sd1", metadata: dict[str, str] | None = None) -> Path:
    """A real kohya LoRA over a few attention layers of ``family`` (12 tensors, detected as such)."""
    return write_sparse(
        path, lora_layout(unet_attention_layers(family)[:4], "kohya", rank=4), metadata=metadata
    )


def broken_file(path: Path) -> Path:
    """A "model" that is really an error page: the kind of file a failed download leaves."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"<!DOCTYPE html><html>403 Forbidden</html>")
    return path


class CountingInspector:
    """``inspect_file`` that counts how often each file is read."""

    def __init__(self) -> None:
        self.reads: Counter[str] = Counter()

    def __call__(self, path: Path) -> InspectResult:
        self.reads[Path(path).name] += 1
        return inspect_file(path)

    @property
    def total(self) -> int:
        return sum(self.reads.values())


@pytest.fixture
def counting() -> CountingInspector:
    return CountingInspector()


def make_comfyui(base: Path) -> Path:
    """A ComfyUI install with the default models/* layout (old ``clip`` name) and real files."""
    install = base / "ComfyUI"
    (install / "comfy").mkdir(parents=True)
    (install / "folder_paths.py").write_text("# ComfyUI\n")
    (install / "custom_nodes").mkdir()
    models = install / "models"
    write_sparse(models / "checkpoints" / "v1-5-pruned-emaonly.safetensors", ld.sd1_checkpoint())
    write_sparse(
        models / "checkpoints" / "flux1-dev-unet.safetensors", ld.flux("dev", depth=2, depth_single=2)
    )
    write_sparse(models / "clip" / "clip_l.safetensors", clip_l_hf())
    write_sparse(models / "vae" / "ae.safetensors", ld.kl_vae())
    meta = {"ss_tag_frequency": '{"10_blue cat": {"blue cat": 30, "sitting": 4}}'}
    tiny_lora(models / "loras" / "styles" / "Blue_Cat_v2.safetensors", metadata=meta)
    (models / "loras" / "styles" / "Blue_Cat_v2.preview.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (models / "upscale_models").mkdir()
    return install


def make_a1111(base: Path) -> Path:
    install = base / "stable-diffusion-webui"
    (install / "modules").mkdir(parents=True)
    (install / "webui.py").write_text("# A1111\n")
    write_sparse(install / "models" / "Stable-diffusion" / "sdxl_base.safetensors", ld.sdxl_checkpoint())
    tiny_lora(install / "models" / "Lora" / "detail.safetensors", "sdxl")
    tiny_lora(install / "models" / "LyCORIS" / "old.safetensors", "sd1")
    (install / "embeddings").mkdir()
    return install
