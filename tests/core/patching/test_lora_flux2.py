"""FLUX.2 LoRAs: PEFT adapters on every Linear of diffusers' ``Flux2Transformer2DModel`` (128-wide
heads, two of them; two double and two single blocks), written the way the trainers write them --
diffusers' ``save_lora_weights`` (``transformer.`` + PEFT names) and ai-toolkit's
(``diffusion_model.`` + the same names) -- loaded by Loadout's LoRA stack onto the original-layout
(BFL / ComfyUI) network and run against PEFT's unmerged forward in float32: a ``to_q``/``to_k``/
``to_v`` adapter patches its rows of the fused ``qkv``, the final modulation's halves are swapped.
Also the base guess of full-size files in the namings Civitai's come in (ComfyUI's own, diffusers /
ai-toolkit, kohya-style), and FLUX.1's LoRAs still guessed as FLUX.1.
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
from core.models.flux2 import Flux2, image_ids, image_tokens, text_ids
from core.patching.lora_stack import LoraStack
from tests.core.generate.reference_flux2 import flux2_reference, ours_from
from tests.fixtures import layouts_lora as L
from tests.fixtures.st_files import write_sparse

peft = pytest.importorskip("peft")
from diffusers.loaders.lora_base import LoraBaseMixin, _pack_dict_with_prefix  # noqa: E402
from peft import LoraConfig, get_peft_model_state_dict, inject_adapter_in_model  # noqa: E402
from peft.tuners.lora import LoraLayer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

RANK, CONTEXT = 4, 96
#: every Linear: attention, SwiGLU MLPs, the shared modulations, the embedders, the output
TARGETS = (
    r".*(attn\.(to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj|to_add_out|to_qkv_mlp_proj)|"
    r"transformer_blocks\.\d+\.attn\.to_out\.0|single_transformer_blocks\.\d+\.attn\.to_out|"
    r"ff(_context)?\.linear_(in|out)|stream_modulation(_img|_txt)?\.linear|x_embedder|context_embedder|"
    r"timestep_embedder\.linear_[12]|norm_out\.linear|proj_out)"
)


def _peft_pair() -> tuple[Any, Flux2]:
    hf = flux2_reference(heads=2, context=CONTEXT, double=2, single=2, seed=71)
    ours = ours_from(hf)
    config = LoraConfig(r=RANK, lora_alpha=RANK, target_modules=TARGETS, init_lora_weights=False)
    hf = inject_adapter_in_model(config, hf)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in hf.named_parameters():
            if "lora_" in name:
                param.copy_(0.1 * torch.randn(param.shape, generator=gen))
    return hf.eval(), ours


def _save(hf: nn.Module, folder: Path, prefix: str) -> Path:
    layers = _pack_dict_with_prefix(get_peft_model_state_dict(hf), prefix)
    name = f"{prefix}_lora.safetensors"
    LoraBaseMixin.write_lora_layers(layers, str(folder), True, name, None, True)
    return folder / name


def _run(model: Any, x: torch.Tensor, ctx: torch.Tensor, t: torch.Tensor, *, diffusers: bool) -> torch.Tensor:
    b, _, h, w = x.shape
    with torch.no_grad():
        if diffusers:
            out: torch.Tensor = model(
                hidden_states=image_tokens(x), encoder_hidden_states=ctx, timestep=t,
                img_ids=image_ids(1, h, w)[0], txt_ids=text_ids(1, ctx.shape[1])[0], return_dict=False,
            )[0]  # fmt: skip
            return out
        return model(image_tokens(x), image_ids(b, h, w), ctx, text_ids(b, ctx.shape[1]), t)  # type: ignore[no-any-return]


def _rel(ours: torch.Tensor, ref: torch.Tensor, base: torch.Tensor) -> float:
    """The error relative to what the LoRA changes in the output."""
    return float((ours - ref).norm() / (ref - base).norm())


@pytest.mark.parametrize("prefix", ["transformer", "diffusion_model"])
def test_a_peft_lora_file_matches_peft_on_the_original_layout(tmp_path: Path, prefix: str) -> None:
    hf, ours = _peft_pair()
    lora = _save(hf, tmp_path, prefix)
    loaded: LoadedComponent = load_diffusion_model(
        write_safetensors(tmp_path / "model.safetensors", ours.state_dict())
    )
    stack = LoraStack([loaded])
    entry = stack.add(lora)
    peft_modules = sum(isinstance(m, LoraLayer) for m in hf.modules())
    assert entry.base_family == loaded.family == "flux2-klein-4b", entry.analysis
    assert len(entry.report.matched) == peft_modules
    assert entry.report.unmatched == [] and entry.report.shape_mismatches == [] and entry.skipped == []
    stack.apply()
    gen = torch.Generator().manual_seed(11)
    x, ctx = torch.randn(2, 128, 3, 5, generator=gen), torch.randn(2, 7, CONTEXT, generator=gen)
    t = torch.tensor([0.9, 0.35])
    base, got = _run(ours, x, ctx, t, diffusers=False), _run(loaded.module, x, ctx, t, diffusers=False)
    want = _run(hf, x, ctx, t, diffusers=True)
    assert _rel(got, want, base) < 1e-5 and (want - base).abs().max() > 1e-2
    stack.set_strength(entry.id, model=-0.5)  # a strength is PEFT's scale on every layer
    stack.apply()
    for module in hf.modules():
        if isinstance(module, LoraLayer):
            module.scale_layer(-0.5)
    got = _run(loaded.module, x, ctx, t, diffusers=False)
    assert _rel(got, _run(hf, x, ctx, t, diffusers=True), base) < 1e-5


def _full_size_layers(h: int, double: int, single: int, naming: str) -> list[L.Layer]:
    m = 3 * h
    if naming == "original":  # BFL / ComfyUI names (ComfyUI's LoRA saver, kohya-style trainers)
        paths = [(f"double_blocks.{i}.img_attn.qkv", 3 * h, h) for i in range(double)]
        paths += [(f"double_blocks.{i}.img_mlp.0", 2 * m, h) for i in range(double)]
        paths += [(f"single_blocks.{i}.linear1", 3 * h + 2 * m, h) for i in range(single)]
        paths += [(f"single_blocks.{i}.linear2", h, h + m) for i in range(single)]
    else:  # ai-toolkit / diffusers
        paths = [(f"transformer_blocks.{i}.attn.to_q", h, h) for i in range(double)]
        paths += [(f"transformer_blocks.{i}.ff.linear_in", 2 * m, h) for i in range(double)]
        paths += [
            (f"single_transformer_blocks.{i}.attn.to_qkv_mlp_proj", 3 * h + 2 * m, h) for i in range(single)
        ]
    return [L.Layer(p, o, n, component="transformer") for p, o, n in paths]


@pytest.mark.parametrize(
    ("family", "h", "double", "single"),
    [("flux2-klein-4b", 3072, 5, 20), ("flux2-klein-9b", 4096, 8, 24), ("flux2-dev", 6144, 8, 48)],
)
@pytest.mark.parametrize(
    ("naming", "scheme"),
    [("original", "comfyui"), ("original", "kohya"), ("diffusers", "diffusers"), ("diffusers", "comfyui")],
    ids=["comfyui-original", "kohya", "diffusers", "ai-toolkit"],
)
def test_full_size_flux2_loras_are_guessed_by_width(
    tmp_path: Path, family: str, h: int, double: int, single: int, naming: str, scheme: str
) -> None:
    layers = _full_size_layers(h, double, single, naming)
    path = write_sparse(tmp_path / "adapter.safetensors", L.lora_layout(layers, scheme, spelling="lora_A"))
    analysis = analyze_lora(KeyView(read_header(path).tensors), None)
    assert analysis is not None and analysis.base_family == family, analysis


@pytest.mark.parametrize("scheme", ["comfyui", "kohya", "diffusers"])
def test_flux1_loras_are_still_flux1(tmp_path: Path, scheme: str) -> None:
    layers = L.flux_layers("diffusers" if scheme == "diffusers" else "original")
    path = write_sparse(tmp_path / "adapter.safetensors", L.lora_layout(layers, scheme, spelling="lora_A"))
    analysis = analyze_lora(KeyView(read_header(path).tensors), None)
    assert analysis is not None and analysis.base_family == "flux-dev", analysis


def test_each_flux2_takes_only_its_own_loras() -> None:
    assert lora_fits("flux2-klein-4b", "flux2-klein-4b")
    assert not lora_fits("flux2-klein-4b", "flux2-klein-9b") and not lora_fits("flux-dev", "flux2-klein-4b")
