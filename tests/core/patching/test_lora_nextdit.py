"""Z-Image and Lumina 2 LoRAs: PEFT adapters on every Linear of diffusers' transformers (small
width, both forms), written the way the trainers write them -- diffusers' ``save_lora_weights``
(``transformer.`` + PEFT names, through diffusers' own writer) and ai-toolkit's Z-Image files
(``diffusion_model.`` + the same names) -- loaded by Loadout's LoRA stack onto the original-layout
(ComfyUI) network and run against PEFT's unmerged forward in float32. A PEFT ``to_q``/``to_k``/
``to_v`` adapter patches its rows of the fused ``qkv``. Also the base guess of full-size files in
the namings Civitai's come in (ComfyUI's own, ai-toolkit/diffusers, kohya-style).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from core.detect.catalog import lora_fits
from core.detect.keyview import KeyView
from core.detect.lora import analyze_lora
from core.files.safetensors import read_header
from core.files.writer import write_safetensors
from core.loading.loader import LoadedComponent, load_diffusion_model
from core.models.nextdit import NextDiT
from core.patching.lora_stack import LoraStack
from tests.core.generate.reference_nextdit import (
    lumina2_reference,
    lumina2_velocity,
    ours_from,
    z_image_reference,
    z_image_velocity,
)
from tests.fixtures import layouts_lora as L
from tests.fixtures.st_files import write_sparse

peft = pytest.importorskip("peft")
from diffusers.loaders.lora_base import LoraBaseMixin, _pack_dict_with_prefix  # noqa: E402
from peft import LoraConfig, get_peft_model_state_dict, inject_adapter_in_model  # noqa: E402
from peft.tuners.lora import LoraLayer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

RANK = 4
#: every Linear of the blocks and embedders: attention, SwiGLU, modulation, caption, timestep, output
TARGETS = {
    "z-image": r".*(to_q|to_k|to_v|to_out\.0|w1|w2|w3|(layers|noise_refiner)\.\d+\.adaLN_modulation\.0|"
    r"cap_embedder\.1|t_embedder\.mlp\.[02]|all_x_embedder\.2-1|all_final_layer\.2-1\.(linear|adaLN_modulation\.1))",
    "lumina2": r".*(to_q|to_k|to_v|to_out\.0|linear_[123]|norm1\.linear|caption_embedder\.1|x_embedder|"
    r"norm_out\.linear_[12])",
}


def _peft_pair(form: str) -> tuple[Any, NextDiT]:
    if form == "z-image":
        hf = z_image_reference(dim=256, heads=2, layers=2, refiners=2, cap=48, seed=21)
    else:
        hf = lumina2_reference(dim=192, heads=2, kv_heads=1, layers=2, refiners=2, cap=40, seed=22)
    ours = ours_from(hf)
    config = LoraConfig(r=RANK, lora_alpha=RANK, target_modules=TARGETS[form], init_lora_weights=False)
    hf = inject_adapter_in_model(config, hf)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in hf.named_parameters():
            if "lora_" in name:
                param.copy_(0.1 * torch.randn(param.shape, generator=gen))
    return hf.eval(), ours


def _save(hf: nn.Module, folder: Path, prefix: str) -> Path:
    """diffusers' ``save_lora_weights`` (``transformer``) or ai-toolkit's (``diffusion_model``)."""
    layers = _pack_dict_with_prefix(get_peft_model_state_dict(hf), prefix)
    name = f"{prefix}_lora.safetensors"
    LoraBaseMixin.write_lora_layers(layers, str(folder), True, name, None, True)
    return folder / name


def _velocity(form: str, hf: Any, x: torch.Tensor, sigma: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
    return (
        z_image_velocity(hf, x, sigma, list(ctx))
        if form == "z-image"
        else lumina2_velocity(hf, x, sigma, ctx)
    )


def _rel(ours: torch.Tensor, ref: torch.Tensor, base: torch.Tensor) -> float:
    """The error relative to what the LoRA changes in the output."""
    return float((ours - ref).norm() / (ref - base).norm())


@pytest.mark.parametrize("prefix", ["transformer", "diffusion_model"])
@pytest.mark.parametrize("form", ["z-image", "lumina2"])
def test_a_peft_lora_file_matches_peft_on_the_original_layout(tmp_path: Path, form: str, prefix: str) -> None:
    hf, ours = _peft_pair(form)
    lora = _save(hf, tmp_path, prefix)
    loaded: LoadedComponent = load_diffusion_model(
        write_safetensors(tmp_path / "model.safetensors", ours.state_dict())
    )
    assert loaded.family == form
    stack = LoraStack([loaded])
    entry = stack.add(lora)
    peft_modules = sum(isinstance(m, LoraLayer) for m in hf.modules())
    assert entry.base_family == form, entry.analysis
    assert len(entry.report.matched) == peft_modules
    assert entry.report.unmatched == [] and entry.report.shape_mismatches == [] and entry.skipped == []
    stack.apply()
    gen = torch.Generator().manual_seed(11)
    x, sigma = torch.randn(2, 16, 6, 8, generator=gen), torch.tensor([0.9, 0.35])
    ctx = torch.randn(2, 32 if form == "z-image" else 9, ours.config.cap_feat_dim, generator=gen)
    with torch.no_grad():
        base, got = ours(x, sigma, ctx), loaded.module(x, sigma, ctx)
    want = _velocity(form, hf, x, sigma, ctx)
    assert _rel(got, want, base) < 1e-5 and (want - base).abs().max() > 1e-2
    stack.set_strength(entry.id, model=-0.5)  # a strength is PEFT's scale on every layer
    stack.apply()
    for module in hf.modules():
        if isinstance(module, LoraLayer):
            module.scale_layer(-0.5)
    with torch.no_grad():
        got = loaded.module(x, sigma, ctx)
    assert _rel(got, _velocity(form, hf, x, sigma, ctx), base) < 1e-5


def _full_size_layers(form: str, naming: str) -> list[L.Layer]:
    d, ffn, mod = (3840, 10240, 256) if form == "z-image" else (2304, 9216, 1024)
    kv = d if form == "z-image" else 768
    blocks = range(30 if form == "z-image" else 26)
    if naming == "original":  # ComfyUI's own names (its LoRA saver, converted files)
        paths = [("attention.qkv", d + 2 * kv, d), ("attention.out", d, d), ("feed_forward.w1", ffn, d)]
        modulation = "adaLN_modulation.0" if form == "z-image" else "adaLN_modulation.1"
    elif form == "z-image":  # ai-toolkit / diffusers
        paths = [("attention.to_q", d, d), ("attention.to_k", kv, d), ("feed_forward.w1", ffn, d)]
        modulation = "adaLN_modulation.0"
    else:
        paths = [("attn.to_q", d, d), ("attn.to_k", kv, d), ("feed_forward.linear_1", ffn, d)]
        modulation = "norm1.linear"
    layers = [L.Layer(f"layers.{i}.{p}", o, n, component="transformer") for i in blocks for p, o, n in paths]
    layers.append(L.Layer(f"layers.0.{modulation}", 4 * d, mod, component="transformer"))
    return layers


@pytest.mark.parametrize("form", ["z-image", "lumina2"])
@pytest.mark.parametrize(
    ("naming", "scheme"),
    [("original", "comfyui"), ("diffusers", "diffusers"), ("diffusers", "comfyui"), ("diffusers", "kohya")],
    ids=["comfyui-original", "diffusers", "ai-toolkit", "kohya"],
)
def test_full_size_next_dit_loras_are_guessed_by_form(
    tmp_path: Path, form: str, naming: str, scheme: str
) -> None:
    layers = _full_size_layers(form, naming)
    path = write_sparse(tmp_path / "adapter.safetensors", L.lora_layout(layers, scheme, spelling="lora_A"))
    analysis = analyze_lora(KeyView(read_header(path).tensors), None)
    assert analysis is not None and analysis.base_family == form, analysis


def test_z_image_and_lumina2_take_only_their_own_loras() -> None:
    assert lora_fits("z-image", "z-image") and lora_fits("lumina2", "lumina2")
    assert not lora_fits("z-image", "lumina2") and not lora_fits("lumina2", "z-image")
    assert not lora_fits("flux-dev", "z-image")
