"""A LoRA stack on a really loaded model: exact math, incremental changes, clear refusals."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from core.errors import ModelMismatchError
from core.loading.loader import load_checkpoint
from core.patching.adapters import NonFiniteAdapterError
from core.patching.lora_stack import LoraStack
from tests.fixtures.st_files import write_tensors
from tests.fixtures.tiny_models import checkpoint_tensors

RANK = 4


@pytest.fixture(scope="module")
def sd1_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("ckpt") / "tiny-sd15.safetensors"
    return write_tensors(
        path, {k: v.half() if v.is_floating_point() else v for k, v in checkpoint_tensors("sd1").items()}
    )


def _targets(bundle) -> dict[str, tuple[str, tuple[int, ...]]]:  # kohya name -> (component, shape)
    out = {}
    unet = bundle.diffusion_model.module.state_dict()
    for k, v in unet.items():
        if k.endswith(("attn1.to_q.weight", "attn2.to_v.weight", "ff.net.2.weight")):
            out["lora_unet_" + k[: -len(".weight")].replace(".", "_")] = ("diffusion_model", tuple(v.shape))
    te = bundle.text_encoders[0].module.state_dict()
    for k, v in te.items():
        if k.endswith("self_attn.q_proj.weight"):
            out["lora_te_" + k[: -len(".weight")].replace(".", "_")] = ("text_encoder:clip-l", tuple(v.shape))
    return out


def _lora_file(path: Path, targets, *, seed: int, alpha: float = 2.0, nan: bool = False) -> Path:
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, (_, (out, inp)) in targets.items():
        tensors[f"{name}.lora_down.weight"] = torch.randn(RANK, inp, generator=g) * 0.2
        tensors[f"{name}.lora_up.weight"] = torch.randn(out, RANK, generator=g) * 0.2
        tensors[f"{name}.alpha"] = torch.tensor(alpha)
    if nan:
        first = next(iter(targets))
        tensors[f"{first}.lora_up.weight"][0, 0] = math.nan
    return write_tensors(path, tensors, metadata={"ss_network_module": "networks.lora"})


def _expected(w0: torch.Tensor, up: torch.Tensor, down: torch.Tensor, s: float, alpha: float) -> torch.Tensor:
    return (w0.float() + s * (alpha / RANK) * (up.float() @ down.float())).to(w0.dtype)


def test_stack_applies_exact_math_with_separate_strengths_and_restores(
    sd1_file: Path, tmp_path: Path
) -> None:
    bundle = load_checkpoint(sd1_file)
    targets = _targets(bundle)
    lora = _lora_file(tmp_path / "style.safetensors", targets, seed=1)
    originals = {
        c.role + c.family: {k: v.clone() for k, v in c.module.state_dict().items()} for c in bundle.components
    }
    stack = LoraStack(bundle.components)
    entry = stack.add(lora, model_strength=0.8, clip_strength=-1.5)
    assert entry.base_family == "sd1" and len(entry.report.matched) == len(targets)
    assert entry.report.unmatched == [] and entry.skipped == []
    stack.apply()
    from safetensors.torch import load_file

    factors = load_file(str(lora))
    for name, (component, _) in targets.items():
        comp = bundle.diffusion_model if component == "diffusion_model" else bundle.text_encoders[0]
        key = entry.report.matched[name].key
        s = 0.8 if component == "diffusion_model" else -1.5
        w0 = originals[comp.role + comp.family][key]
        want = _expected(w0, factors[f"{name}.lora_up.weight"], factors[f"{name}.lora_down.weight"], s, 2.0)
        assert torch.equal(comp.module.state_dict()[key], want), name
    # a text-encoder strength change recomputes text-encoder keys only
    stack.set_strength(entry.id, clip=0.3)
    reports = stack.apply()
    assert reports["diffusion_model"].recomputed == 0
    assert reports["text_encoder:clip-l"].recomputed == len(entry.keys["text_encoder:clip-l"])
    stack.unpatch()
    for comp in bundle.components:
        for k, v in comp.module.state_dict().items():
            assert torch.equal(v, originals[comp.role + comp.family][k]), k


def test_two_loras_stack_and_removal_restores_the_first_alone(sd1_file: Path, tmp_path: Path) -> None:
    bundle = load_checkpoint(sd1_file)
    targets = _targets(bundle)
    stack = LoraStack(bundle.components)
    a = stack.add(_lora_file(tmp_path / "a.safetensors", targets, seed=1))
    stack.apply()
    only_a = {k: v.clone() for k, v in bundle.diffusion_model.module.state_dict().items()}
    b = stack.add(_lora_file(tmp_path / "b.safetensors", targets, seed=2), model_strength=-0.5)
    stack.apply()
    key = a.report.matched[next(iter(targets))].key
    assert not torch.equal(bundle.diffusion_model.module.state_dict()[key], only_a[key])
    stack.remove(b.id)
    stack.apply()
    for k, v in bundle.diffusion_model.module.state_dict().items():
        assert torch.equal(v, only_a[k]), k


def test_lora_for_another_family_is_refused_unless_forced(sd1_file: Path, tmp_path: Path) -> None:
    bundle = load_checkpoint(sd1_file)
    # an SDXL-shaped LoRA (cross-attention from 2048-wide text)
    tensors = {
        "lora_unet_input_blocks_4_1_transformer_blocks_0_attn2_to_k.lora_down.weight": torch.zeros(4, 2048),
        "lora_unet_input_blocks_4_1_transformer_blocks_0_attn2_to_k.lora_up.weight": torch.zeros(640, 4),
        "lora_te2_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight": torch.zeros(4, 1280),
        "lora_te2_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight": torch.zeros(1280, 4),
    }
    path = write_tensors(tmp_path / "xl_style.safetensors", tensors)
    stack = LoraStack(bundle.components)
    with pytest.raises(ModelMismatchError) as err:
        stack.add(path)
    assert err.value.code == "lora_family_mismatch"
    assert "targets Stable Diffusion XL" in err.value.message and "xl_style" in err.value.message
    entry = stack.add(path, force=True)
    assert (
        len(entry.report.matched) == 0
        and len(entry.report.unmatched) + len(entry.report.shape_mismatches) == 2
    )


def test_nan_lora_is_refused_and_nothing_is_applied(sd1_file: Path, tmp_path: Path) -> None:
    bundle = load_checkpoint(sd1_file)
    stack = LoraStack(bundle.components)
    with pytest.raises(NonFiniteAdapterError) as err:
        stack.add(_lora_file(tmp_path / "broken.safetensors", _targets(bundle), seed=3, nan=True))
    assert "broken.safetensors" in err.value.message and err.value.code == "nonfinite_adapter"
    assert stack.entries == {} and all(not p.sets for p in stack.patchers.values())
