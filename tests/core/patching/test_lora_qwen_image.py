"""Qwen-Image LoRAs: PEFT adapters on every Linear of diffusers' transformer (narrow width, 128-wide
heads, two blocks), written the way the trainers write them -- diffusers' ``save_lora_weights``
(``transformer.`` + PEFT names, through diffusers' own writer), ai-toolkit's (``diffusion_model.``
+ the same names) and kohya-style (``lora_unet_transformer_blocks_0_attn_to_q`` with
``lora_down``/``lora_up``/``alpha``, as Musubi Tuner and the Lightning LoRAs' kohya copies are) --
loaded by Loadout's LoRA stack onto the network (the released names are its own) and run against
PEFT's unmerged forward in float32."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from core.files.writer import write_safetensors
from core.loading.loader import LoadedComponent, load_diffusion_model
from core.models.qwen_image import QwenImageDiT
from core.patching.lora_stack import LoraStack
from tests.core.generate.reference_qwen_image import ours_from, qwen_image_reference, qwen_image_velocity

peft = pytest.importorskip("peft")
from diffusers.loaders.lora_base import LoraBaseMixin, _pack_dict_with_prefix  # noqa: E402
from peft import LoraConfig, get_peft_model_state_dict, inject_adapter_in_model  # noqa: E402
from peft.tuners.lora import LoraLayer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

RANK = 4
#: every Linear: attention (both streams), MLPs, modulation, embedders, output
TARGETS = (
    r".*(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj|to_out\.0|to_add_out|net\.0\.proj|net\.2|"
    r"img_mod\.1|txt_mod\.1|img_in|txt_in|timestep_embedder\.linear_[12]|norm_out\.linear|proj_out)"
)


@pytest.fixture(scope="module")
def pair() -> tuple[Any, QwenImageDiT]:
    hf = qwen_image_reference(dim=256, heads=2, layers=2, seed=21)
    ours = ours_from(hf)  # on the same tensors: PEFT adds its layers beside them
    config = LoraConfig(r=RANK, lora_alpha=RANK, target_modules=TARGETS, init_lora_weights=False)
    hf = inject_adapter_in_model(config, hf)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in hf.named_parameters():
            if "lora_" in name:
                param.copy_(0.1 * torch.randn(param.shape, generator=gen))
    return hf.eval(), ours


def _peft_file(hf: nn.Module, folder: Path, prefix: str) -> Path:
    layers = _pack_dict_with_prefix(get_peft_model_state_dict(hf), prefix)
    name = f"{prefix}_lora.safetensors"
    LoraBaseMixin.write_lora_layers(layers, str(folder), True, name, None, True)
    return folder / name


def _kohya_file(hf: nn.Module, folder: Path) -> Path:
    """The same adapters in kohya's names: dots as underscores, ``lora_down``/``lora_up`` and the
    alpha beside (the scale is alpha / rank: alpha twice the rank, the up weights halved)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in get_peft_model_state_dict(hf).items():
        module, _, rest = key.partition(".lora_")
        name = "lora_unet_" + module.replace(".", "_")
        down = rest.startswith("A")
        out[f"{name}.{'lora_down' if down else 'lora_up'}.weight"] = (
            value if down else value / 2
        ).contiguous()
        out[f"{name}.alpha"] = torch.tensor(float(2 * RANK))
    return write_safetensors(folder / "kohya_lora.safetensors", out)


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    return (
        torch.randn(2, 16, 8, 4, generator=gen),
        torch.tensor([0.9, 0.35]),
        torch.randn(2, 9, 3584, generator=gen),
    )


def _rel(ours: torch.Tensor, ref: torch.Tensor, base: torch.Tensor) -> float:
    """The error relative to what the LoRA changes in the output."""
    return float((ours - ref).norm() / (ref - base).norm())


@pytest.mark.parametrize("naming", ["transformer", "diffusion_model", "kohya"])
def test_a_lora_file_matches_peft(tmp_path: Path, pair: tuple[Any, QwenImageDiT], naming: str) -> None:
    hf, ours = pair
    lora = _kohya_file(hf, tmp_path) if naming == "kohya" else _peft_file(hf, tmp_path, naming)
    loaded: LoadedComponent = load_diffusion_model(
        write_safetensors(tmp_path / "model.safetensors", ours.state_dict())
    )
    assert loaded.family == "qwen-image"
    stack = LoraStack([loaded])
    entry = stack.add(lora)
    peft_modules = sum(isinstance(m, LoraLayer) for m in hf.modules())
    assert entry.base_family == "qwen-image", entry.analysis
    assert len(entry.report.matched) == peft_modules == 2 * 14 + 6
    assert entry.report.unmatched == [] and entry.report.shape_mismatches == [] and entry.skipped == []
    stack.apply()
    x, sigma, ctx = _inputs()
    with torch.no_grad():
        base, got = ours(x, sigma, ctx), loaded.module(x, sigma, ctx)
    want = qwen_image_velocity(hf, x, sigma, ctx)
    assert _rel(got, want, base) < 1e-5 and (want - base).abs().max() > 1e-2
    stack.set_strength(entry.id, model=0.5)  # a strength is PEFT's scale on every layer
    stack.apply()
    for module in hf.modules():
        if isinstance(module, LoraLayer):
            module.scale_layer(0.5)
    with torch.no_grad():
        got = loaded.module(x, sigma, ctx)
    want = qwen_image_velocity(hf, x, sigma, ctx)
    for module in hf.modules():
        if isinstance(module, LoraLayer):
            module.unscale_layer()
    assert _rel(got, want, base) < 1e-5
