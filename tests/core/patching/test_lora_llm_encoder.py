"""LoRAs that patch a decoder-LLM text encoder (Z-Image's Qwen3, Lumina 2's Gemma-2): PEFT adapters
on every Linear of transformers' ``Qwen3Model`` / ``Gemma2Model``, written in the namings trainers
use -- diffusers/PEFT (``text_encoder.`` + PEFT names, with and without the ``model.`` of a
``*ForCausalLM``), kohya (``lora_te_`` / ``lora_te1_`` + underscored names, ``.alpha``), ComfyUI's
(``text_encoders.qwen3_4b.transformer.`` ...) and a bare PEFT save (``base_model.model.model.``)
-- applied by Loadout's LoRA stack to the encoder loaded from a Comfy-Org file beside a Z-Image /
Lumina 2 diffusion model, and run against PEFT's unmerged forward in float32 (hidden states to
1e-5 of what the LoRA changes), at clip strength 1 and -0.5."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from core.files.writer import write_safetensors
from core.loading.loader import load_diffusion_model, load_text_encoder
from core.models.llm import LlmConfig
from core.models.nextdit import NextDiT, NextDiTConfig
from core.patching.lora_stack import LoraStack
from tests.core.models.llm.reference import hf_config, hf_model
from tests.fixtures.llm_files import write_comfy

peft = pytest.importorskip("peft")
from peft import LoraConfig, get_peft_model_state_dict, inject_adapter_in_model  # noqa: E402
from peft.tuners.lora import LoraLayer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

RANK = 4
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
IDS = torch.tensor([[3, 17, 200, 5, 9, 1, 44, 300]])
COMFY_NAMES = {"qwen3-4b": "qwen3_4b", "gemma2-2b": "gemma2_2b"}


def _config(family: str) -> LlmConfig:
    c = LlmConfig.preset(family)
    return dataclasses.replace(
        c, vocab_size=512, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=256
    )


def _peft_encoder(family: str) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """transformers' model with PEFT adapters on every Linear, and its base weights (ours' names)."""
    cfg = _config(family)
    if family.startswith("gemma"):  # eager attention, without the soft-cap ComfyUI does not apply
        hf = hf_model(family, hf_config(family, cfg, attn_logit_softcapping=None), attn="eager")
    else:
        hf = hf_model(family, hf_config(family, cfg))
    base = {"model." + k: v.clone() for k, v in hf.state_dict().items() if "rotary" not in k}
    config = LoraConfig(r=RANK, lora_alpha=2 * RANK, target_modules=TARGETS, init_lora_weights=False)
    inject_adapter_in_model(config, hf)
    return hf, base


def _lora_file(hf: nn.Module, path: Path, naming: str, family: str) -> Path:
    """The adapter in one trainer's naming (PEFT's lora_A/B, or kohya's lora_down/up + alpha)."""
    state = get_peft_model_state_dict(hf)  # "layers.0.self_attn.q_proj.lora_A.weight"
    out: dict[str, torch.Tensor] = {}
    for key, t in state.items():
        module, _, factor = key.partition(".lora_")
        down = factor.startswith("A")
        if naming == "diffusers":
            out[f"text_encoder.{module}.lora_{factor}"] = t
        elif naming == "diffusers-causal-lm":
            out[f"text_encoder.model.{module}.lora_{factor}"] = t
        elif naming == "peft":
            out[f"base_model.model.model.{module}.lora_{factor}"] = t
        elif naming in ("kohya", "kohya-te1"):
            head = "lora_te_" if naming == "kohya" else "lora_te1_"
            name = head + ("model." + module).replace(".", "_")
            out[f"{name}.lora_{'down' if down else 'up'}.weight"] = t
            out[f"{name}.alpha"] = torch.tensor(float(2 * RANK))
        else:  # ComfyUI's own: the encoder's state-dict names under text_encoders.<name>.transformer.
            name = f"text_encoders.{COMFY_NAMES[family]}.transformer.model.{module}"
            out[f"{name}.lora_{'down' if down else 'up'}.weight"] = t
            out[f"{name}.alpha"] = torch.tensor(float(2 * RANK))
    scale_free = naming in ("diffusers", "diffusers-causal-lm", "peft")
    if scale_free:  # PEFT names keep no alpha: such a file applies at alpha = rank (diffusers' rule)
        out = {k: (t * 2 if ".lora_B." in k else t) for k, t in out.items()}
    return write_safetensors(path, {k: v.contiguous() for k, v in out.items()})


def _dit(folder: Path, family: str) -> Path:
    if family == "qwen3-4b":
        cfg = NextDiTConfig(dim=256, n_layers=1, n_refiner_layers=1, n_heads=2, n_kv_heads=2, ffn_hidden=512)
    else:
        cfg = NextDiTConfig.lumina2(
            dim=192, n_layers=1, n_refiner_layers=1, n_heads=2, n_kv_heads=1, ffn_hidden=512
        )
    gen = torch.Generator().manual_seed(5)
    state = {
        k: torch.randn(t.shape, generator=gen) * 0.02
        for k, t in NextDiT(cfg, device="meta").state_dict().items()
    }
    return write_safetensors(folder / "dit.safetensors", state)


def _hidden_hf(hf: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return hf(IDS, output_hidden_states=True).hidden_states[-2]


def _hidden_ours(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = model(IDS, None, taps=(-2,), dtype=torch.float32)[0]
    return out


def _rel(ours: torch.Tensor, ref: torch.Tensor, base: torch.Tensor) -> float:
    return float((ours - ref).norm() / (ref - base).norm())


NAMINGS = ["diffusers", "diffusers-causal-lm", "peft", "kohya", "kohya-te1", "comfyui"]
Built = tuple[nn.Module, Path, Path]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    """Per family, built once: the PEFT model, the Comfy-Org encoder file and a diffusion model file."""
    out: dict[str, Built] = {}
    for family in ("qwen3-4b", "gemma2-2b"):
        folder = tmp_path_factory.mktemp(family)
        hf, base = _peft_encoder(family)
        spiece = {"spiece_model": torch.zeros(4, dtype=torch.uint8)} if family.startswith("gemma") else None
        te_path = write_comfy(folder / "te.safetensors", base, dtype=torch.float32, extra=spiece)
        out[family] = (hf, te_path, _dit(folder, family))
    return out


CASES = [("qwen3-4b", n) for n in NAMINGS] + [("gemma2-2b", n) for n in ("diffusers", "kohya", "comfyui")]


@pytest.mark.parametrize(("family", "naming"), CASES)
def test_an_encoder_lora_matches_peft_through_the_stack(
    built: dict[str, Built], tmp_path: Path, family: str, naming: str
) -> None:
    hf, te_path, dit_path = built[family]
    te = load_text_encoder(te_path)
    assert te.family == family
    lora = _lora_file(hf, tmp_path / "lora.safetensors", naming, family)
    stack = LoraStack([load_diffusion_model(dit_path), te])
    entry = stack.add(lora)
    layers = [m for m in hf.modules() if isinstance(m, LoraLayer)]
    assert len(entry.report.matched) == len(layers), entry.report.to_json()
    assert {t.component for t in entry.report.matched.values()} == {f"text_encoder:{family}"}
    assert entry.report.unmatched == [] and entry.report.shape_mismatches == [] and entry.skipped == []
    before = _hidden_ours(te.module)
    stack.apply()
    want = _hidden_hf(hf)
    assert _rel(_hidden_ours(te.module), want, before) < 1e-5 and (want - before).abs().max() > 1e-3
    stack.set_strength(entry.id, clip=-0.5)
    stack.apply()
    try:
        for module in layers:
            module.scale_layer(-0.5)
        assert _rel(_hidden_ours(te.module), _hidden_hf(hf), before) < 1e-5
    finally:
        for module in layers:
            module.unscale_layer()
