"""A real PixArt LoRA: trained-shape PEFT adapters on diffusers' PixArtTransformer2DModel, saved the
way diffusers' ``save_lora_weights`` writes them (``get_peft_model_state_dict`` under the
``transformer.`` prefix, through diffusers' own writer), loaded by Loadout's LoRA stack onto the
original-layout network, against PEFT's unmerged forward in float32. Also the base-family guess
of full-size PixArt LoRAs in both namings.

The adapter's ``lora_alpha`` equals its rank: diffusers' file keeps no alpha (its loader, like
Loadout's, then scales by 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from core.archs.pixart.network import PixArt
from core.detect.catalog import lora_fits
from core.detect.keyview import KeyView
from core.detect.lora import analyze_lora
from core.files.safetensors import read_header
from core.files.writer import write_safetensors
from core.loading.loader import LoadedComponent, load_diffusion_model
from core.patching.lora_stack import LoraStack
from tests.core.generate.reference import pixart_pair
from tests.fixtures import layouts_lora as L
from tests.fixtures.st_files import write_sparse

peft = pytest.importorskip("peft")
from diffusers.loaders.lora_base import LoraBaseMixin, _pack_dict_with_prefix  # noqa: E402
from peft import LoraConfig, get_peft_model_state_dict, inject_adapter_in_model  # noqa: E402
from peft.tuners.lora import LoraLayer  # noqa: E402

T5_WIDTH, RANK = 24, 4
#: every Linear (and the patch embedding's conv) of diffusers' PixArt: attention, feed-forward,
#: caption projection, timestep and (α) size embedders, the adaLN-single projection, the output
TARGETS = [
    "to_q", "to_k", "to_v", "to_out.0", "ff.net.0.proj", "ff.net.2", "linear_1", "linear_2",
    "adaln_single.linear", "proj_out", "pos_embed.proj",
]  # fmt: skip


def _peft_pixart(alpha: bool) -> tuple[Any, PixArt]:
    hf, ours = pixart_pair(T5_WIDTH, seed=43, alpha=alpha)
    config = LoraConfig(r=RANK, lora_alpha=RANK, target_modules=TARGETS, init_lora_weights=False)
    hf = inject_adapter_in_model(config, hf)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in hf.named_parameters():
            if "lora_" in name:
                param.copy_(0.1 * torch.randn(param.shape, generator=gen))
    return hf.eval(), ours


def _save_like_diffusers(hf: nn.Module, folder: Path) -> Path:
    """What ``save_lora_weights(transformer_lora_layers=get_peft_model_state_dict(transformer))``
    writes: the PEFT names under ``transformer.``, through diffusers' own file writer."""
    layers = _pack_dict_with_prefix(get_peft_model_state_dict(hf), "transformer")
    name = "pytorch_lora_weights.safetensors"
    LoraBaseMixin.write_lora_layers(layers, str(folder), True, name, None, True)
    return folder / name


def _loaded(ours: PixArt, folder: Path) -> LoadedComponent:
    """The network as an original-layout (ComfyUI) file, with its null caption (Σ: 300 tokens, α: 120)."""
    state = {k: v.clone() for k, v in ours.state_dict().items()}
    tokens = 120 if ours.config.micro_condition else 300
    state["y_embedder.y_embedding"] = torch.randn(
        tokens, T5_WIDTH, generator=torch.Generator().manual_seed(5)
    )
    return load_diffusion_model(write_safetensors(folder / "pixart.safetensors", state))


def _peft_eps(hf: Any, x: torch.Tensor, t: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
    added: dict[str, Any] = {"resolution": None, "aspect_ratio": None}
    if hf.config.use_additional_conditions:  # α: the picture's size, as ComfyUI passes it
        b, _, h, w = x.shape
        added = {
            "resolution": torch.tensor([[8.0 * h, 8.0 * w]] * b),
            "aspect_ratio": torch.tensor([[h / w]] * b),
        }
    with torch.no_grad():
        eps: torch.Tensor = hf(x, encoder_hidden_states=ctx, timestep=t, added_cond_kwargs=added).sample[
            :, :4
        ]
    return eps


def _rel(ours: torch.Tensor, ref: torch.Tensor, base: torch.Tensor) -> float:
    """The error relative to what the LoRA changes in the output."""
    return float((ours - ref).norm() / (ref - base).norm())


@pytest.mark.parametrize(("alpha", "family"), [(False, "pixart-sigma"), (True, "pixart-alpha")])
def test_a_diffusers_pixart_lora_file_matches_peft_on_the_original_layout(
    tmp_path: Path, alpha: bool, family: str
) -> None:
    hf, ours = _peft_pixart(alpha)
    lora = _save_like_diffusers(hf, tmp_path)
    loaded = _loaded(ours, tmp_path)
    assert loaded.family == family
    stack = LoraStack([loaded])
    entry = stack.add(lora)
    peft_modules = sum(isinstance(m, LoraLayer) for m in hf.modules())
    assert entry.base_family == family and entry.analysis.layout == "diffusers"
    assert len(entry.report.matched) == peft_modules == (31 if alpha else 27)
    assert entry.report.unmatched == [] and entry.report.shape_mismatches == [] and entry.skipped == []
    stack.apply()
    gen = torch.Generator().manual_seed(11)
    x, ctx = torch.randn(2, 4, 36, 40, generator=gen), torch.randn(2, 7, T5_WIDTH, generator=gen)
    t = torch.tensor([999.0, 321.0])
    with torch.no_grad():
        base, got = ours(x, t, ctx), loaded.module(x, t, ctx)
    want = _peft_eps(hf, x, t, ctx)
    assert _rel(got, want, base) < 1e-5 and (want - base).abs().max() > 1e-2
    # a strength is PEFT's scale on every layer
    stack.set_strength(entry.id, model=-0.5)
    stack.apply()
    for module in hf.modules():
        if isinstance(module, LoraLayer):
            module.scale_layer(-0.5)
    with torch.no_grad():
        got = loaded.module(x, t, ctx)
    assert _rel(got, _peft_eps(hf, x, t, ctx), base) < 1e-5


def _pixart_layers(naming: str, alpha: bool = False) -> list[L.Layer]:
    d, blocks = 1152, range(28)
    if naming == "diffusers":
        paths = ("attn1.to_q", "attn1.to_v", "attn2.to_k", "attn2.to_out.0", "ff.net.0.proj")
        layers = [
            L.Layer(f"transformer_blocks.{i}.{p}", d, d, component="transformer")
            for i in blocks
            for p in paths
        ]
        if alpha:
            layers.append(
                L.Layer("adaln_single.emb.resolution_embedder.linear_1", 384, 256, component="transformer")
            )
        return layers
    paths = ("attn.qkv", "attn.proj", "cross_attn.q_linear", "cross_attn.kv_linear", "mlp.fc1")
    return [L.Layer(f"blocks.{i}.{p}", d, d, component="transformer") for i in blocks for p in paths]


@pytest.mark.parametrize(
    ("layers", "scheme", "family"),
    [
        (_pixart_layers("diffusers"), "diffusers", "pixart-sigma"),
        (_pixart_layers("diffusers", alpha=True), "diffusers", "pixart-alpha"),
        (_pixart_layers("original"), "comfyui", "pixart-sigma"),
    ],
    ids=["diffusers", "diffusers-alpha", "comfyui-original"],
)
def test_full_size_pixart_loras_are_guessed_pixart(
    tmp_path: Path, layers: list[L.Layer], scheme: str, family: str
) -> None:
    path = write_sparse(tmp_path / "adapter.safetensors", L.lora_layout(layers, scheme, spelling="lora_A"))
    header = read_header(path)
    analysis = analyze_lora(KeyView(header.tensors), None)
    assert analysis is not None and analysis.base_family == family, analysis
    assert "1152 wide" in analysis.base_evidence or "micro-condition" in analysis.base_evidence
    assert not any("wide (PixArt has" in w for w in analysis.warnings)


def test_sigma_and_alpha_take_each_others_loras_and_no_other_family_s() -> None:
    assert lora_fits("pixart-sigma", "pixart-alpha") and lora_fits("pixart-alpha", "pixart-sigma")
    assert not lora_fits("pixart-sigma", "flux-dev") and not lora_fits("sdxl", "pixart-sigma")
