"""Smoke test for bench/patch.py's bake comparison: its ComfyUI-style baseline and Loadout's bake
give the same bits on a real (small) checkpoint with LoRA and LoCon modules, and the SD1 ResNet
layer list it builds its LoCon from is the real one (every module matches a full-size SD1.5 UNet)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from bench import patch as bp
from core.loading.loader import load_checkpoint
from core.patching.lora_stack import LoraStack
from tests.fixtures import layouts_diffusion as ld
from tests.fixtures.layouts_lora import clip_layers, lora_layout, unet_attention_layers
from tests.fixtures.st_files import write_sparse, write_tensors
from tests.fixtures.tiny_models import checkpoint_tensors


def _digest(stack: LoraStack) -> str:
    h = hashlib.sha256()
    for patcher in stack.patchers.values():
        for key in sorted(patcher.patched_keys()):
            h.update(patcher.model.get_parameter(key).contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def test_comfy_style_baseline_and_loadout_bake_agree_bit_for_bit(tmp_path: Path) -> None:
    torch.manual_seed(0)
    ckpt = write_tensors(
        tmp_path / "tiny.safetensors", {k: v.half() for k, v in checkpoint_tensors("sd1").items()}
    )
    unet = load_checkpoint(ckpt).diffusion_model.module.state_dict()
    g = torch.Generator().manual_seed(1)
    lora: dict[str, torch.Tensor] = {}
    for k, v in unet.items():
        linear = k.endswith(("to_q.weight", "to_v.weight", "proj_out.weight")) and v.ndim == 2
        conv = k.endswith("in_layers.2.weight") and v.ndim == 4
        if linear or conv:
            name = "lora_unet_" + k[: -len(".weight")].replace(".", "_")
            rank = 3
            lora[f"{name}.lora_down.weight"] = (torch.randn(rank, *v.shape[1:], generator=g) * 0.2).half()
            up_shape = (v.shape[0], rank, 1, 1) if conv else (v.shape[0], rank)
            lora[f"{name}.lora_up.weight"] = (torch.randn(up_shape, generator=g) * 0.2).half()
            lora[f"{name}.alpha"] = torch.tensor(2.0).half()
    path = write_tensors(tmp_path / "lora.safetensors", lora)
    digests = []
    for method in ("baseline", "loadout"):
        stack = LoraStack(load_checkpoint(ckpt).components)
        entry = stack.add(path, 0.7)
        assert len(entry.report.matched) == len(lora) // 3 and any(
            t.key.endswith("in_layers.2.weight") for t in entry.report.matched.values()
        )
        if method == "baseline":
            assert bp.comfy_bake(stack) == len(entry.report.matched)
        else:
            stack.apply()
        digests.append(_digest(stack))
    assert digests[0] == digests[1]


def test_the_350_module_locon_matches_a_full_size_sd15(tmp_path: Path) -> None:
    ckpt = write_sparse(tmp_path / "sd15.safetensors", ld.sd1_checkpoint())
    layers = [*unet_attention_layers("sd1"), *bp.sd1_resnet_layers(), *clip_layers(768, 12, "te1")]
    shapes = lora_layout(layers, "kohya", rank=4)
    tensors = {k: torch.zeros(s, dtype=torch.float16) for k, s in shapes.items()}
    lora = write_tensors(tmp_path / "locon.safetensors", tensors)
    stack = LoraStack(load_checkpoint(ckpt).components)
    entry = stack.add(lora)
    assert len(layers) == 350
    assert (len(entry.report.matched), len(entry.report.unmatched), entry.skipped) == (350, 0, [])
