"""FLUX.1 control LoRAs (BFL's ``flux1-canny-dev-lora`` / ``flux1-depth-dev-lora`` layout) on a
small FLUX.1 [dev] written to a file and loaded: the stack widens img_in from 64 to 128 inputs
with zeros before adding the LoRA's change (ComfyUI's ``reshape_weight``), at the LoRA's strength
as ComfyUI computes it (``pad(W) + s * up @ down``, biases ``b + s * diff_b``, the norm scales
``W + s * (set - W)``); taking it off puts the original 64-wide tensor back (the same tensor).
A control LoRA on a model that is already 128 wide, on another family, or twice, is refused in
words; a control model called without its control picture is refused in words too.

The numbers against diffusers' FluxControlPipeline are in
tests/core/generate/test_parity_flux_control.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.archs.conditioning import Conditioning
from core.archs.flux.net import NET
from core.detect.keyview import KeyView
from core.detect.lora import analyze_lora
from core.detect.lora_flux_control import control_inputs
from core.errors import ModelMismatchError
from core.files.safetensors import read_header
from core.files.writer import write_safetensors
from core.loading.loader import LoadedComponent, load_diffusion_model
from core.models.flux import Flux, FluxConfig
from core.models.patches import NO_PATCHES
from core.patching.lora_stack import LoraStack

pytestmark = pytest.mark.usefixtures("one_thread")

HIDDEN, RANK = 256, 2
NORMS = tuple(
    f"{block}.{norm}"
    for block in ("double_blocks.0.img_attn.norm", "double_blocks.0.txt_attn.norm", "single_blocks.0.norm")
    for norm in ("query_norm", "key_norm")
)


def _model(folder: Path, inputs: int = 64, *, guidance: bool = True) -> LoadedComponent:
    torch.manual_seed(3)
    config = FluxConfig(
        in_channels=inputs, out_channels=64, vec_in_dim=32, context_in_dim=24, hidden_size=HIDDEN,
        num_heads=2, depth=1, depth_single_blocks=1, axes_dim=(16, 56, 56), guidance_embed=guidance,
    )  # fmt: skip
    flux = Flux(config)
    with torch.no_grad():
        for p in flux.parameters():
            p.copy_(torch.randn_like(p) * 0.05)
    path = folder / f"flux-{inputs}-{int(guidance)}.safetensors"
    return load_diffusion_model(write_safetensors(path, flux.state_dict()))


def control_lora(path: Path, seed: int = 5, hidden: int = HIDDEN) -> dict[str, torch.Tensor]:
    """BFL's layout: lora_A/lora_B (+ lora_B.bias) on img_in (128 inputs) and one qkv, norm scales."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * 0.1

    sd = {
        "img_in.lora_A.weight": rand(RANK, 128), "img_in.lora_B.weight": rand(hidden, RANK),
        "img_in.lora_B.bias": rand(hidden),
        "double_blocks.0.img_attn.qkv.lora_A.weight": rand(RANK, hidden),
        "double_blocks.0.img_attn.qkv.lora_B.weight": rand(3 * hidden, RANK),
        "double_blocks.0.img_attn.qkv.lora_B.bias": rand(3 * hidden),
        **{f"{n}.scale": 1.0 + rand(hidden // 2) for n in NORMS},
    }  # fmt: skip
    write_safetensors(path, sd)
    return sd


def test_control_lora_is_detected_with_its_parts(tmp_path: Path) -> None:
    path = tmp_path / "flux1-depth-dev-lora.safetensors"
    control_lora(path)
    analysis = analyze_lora(KeyView(read_header(path).tensors))
    assert analysis is not None
    assert control_inputs(analysis.modules) == 128 and analysis.summary.control == "input"
    parts = {m.path: m.parts for m in analysis.modules}
    assert parts["img_in"] == ("diff_b", "down", "up")
    assert all(parts[n] == ("set_weight",) for n in NORMS)
    assert any("control LoRA" in w and "Canny or Depth" in w for w in analysis.warnings)


def test_control_lora_widens_img_in_at_its_strength_and_restores_it(tmp_path: Path) -> None:
    loaded = _model(tmp_path)
    flux = loaded.module
    original = flux.img_in.weight.data
    bias, qkv_bias = flux.img_in.bias.data.clone(), flux.double_blocks[0].img_attn.qkv.bias.data.clone()
    norm = flux.double_blocks[0].img_attn.norm.key_norm.scale.data.clone()
    sd = control_lora(tmp_path / "control.safetensors")
    stack = LoraStack([loaded])
    strength = 0.5
    entry = stack.add(tmp_path / "control.safetensors", strength)
    assert not entry.skipped and not entry.report.shape_mismatches
    stack.apply()

    wide = torch.zeros(HIDDEN, 128)
    wide[:, :64] = original.float()
    expected = wide + strength * sd["img_in.lora_B.weight"] @ sd["img_in.lora_A.weight"]
    assert tuple(flux.img_in.weight.shape) == (HIDDEN, 128)
    torch.testing.assert_close(flux.img_in.weight.float(), expected, rtol=0, atol=1e-6)
    want_bias = bias + strength * sd["img_in.lora_B.bias"]
    torch.testing.assert_close(flux.img_in.bias, want_bias, rtol=0, atol=1e-6)
    qkv = flux.double_blocks[0].img_attn.qkv.bias
    want_qkv = qkv_bias + strength * sd["double_blocks.0.img_attn.qkv.lora_B.bias"]
    torch.testing.assert_close(qkv, want_qkv, rtol=0, atol=1e-6)
    set_to = sd["double_blocks.0.img_attn.norm.key_norm.scale"]
    scale = flux.double_blocks[0].img_attn.norm.key_norm.scale
    torch.testing.assert_close(scale, norm + strength * (set_to - norm), rtol=0, atol=1e-6)

    # the widened model takes the control picture's 16 channels beside the latent's
    x = torch.randn(1, 32, 4, 4)
    cond = Conditioning(torch.randn(1, 5, 24), torch.randn(1, 32), torch.tensor([3.5]))
    with torch.no_grad():
        assert NET.forward(flux, x, torch.tensor([0.5]), cond, NO_PATCHES).shape == (1, 16, 4, 4)

    stack.remove(entry.id)
    stack.apply()
    restored = flux.img_in.weight
    assert restored.shape == original.shape and torch.equal(restored, original)
    assert restored.data_ptr() == original.data_ptr()  # the backup itself, not a copy
    assert torch.equal(flux.img_in.bias, bias)
    assert torch.equal(flux.double_blocks[0].img_attn.norm.key_norm.scale, norm)


def test_control_model_without_its_picture_is_refused_in_words(tmp_path: Path) -> None:
    flux = _model(tmp_path, 128).module
    cond = Conditioning(torch.randn(1, 5, 24), torch.randn(1, 32), torch.tensor([3.5]))
    with pytest.raises(ModelMismatchError, match="takes 32 input channels and was given 16") as err:
        NET.forward(flux, torch.randn(1, 16, 4, 4), torch.tensor([0.5]), cond, NO_PATCHES)
    assert err.value.code == "missing_conditioning"


def test_control_lora_is_refused_where_it_does_not_fit(tmp_path: Path) -> None:
    lora = tmp_path / "flux1-canny-dev-lora.safetensors"
    control_lora(lora)
    with pytest.raises(ModelMismatchError, match="already takes a control picture"):
        LoraStack([_model(tmp_path, 128)]).add(lora)
    with pytest.raises(ModelMismatchError, match=r"control LoRA; the loaded model is FLUX.1 \[schnell\]"):
        LoraStack([_model(tmp_path, guidance=False)]).add(lora, force=True)
    stack = LoraStack([_model(tmp_path)])
    stack.add(lora)
    with pytest.raises(ModelMismatchError, match="is one already"):
        stack.add(lora)


def test_a_control_lora_in_diffusers_layout_patches_as_the_bfl_one(tmp_path: Path) -> None:
    """diffusers' names (``x_embedder``, ``to_q``/``to_k``/``to_v`` rows of the fused qkv with their
    bias rows, ``attn.norm_q.weight`` ...) give the weights BFL's names give."""
    sd = control_lora(tmp_path / "bfl.safetensors")
    names = {"query_norm": "norm_q", "key_norm": "norm_k"}
    hf = {
        "transformer.x_embedder.lora_A.weight": sd["img_in.lora_A.weight"],
        "transformer.x_embedder.lora_B.weight": sd["img_in.lora_B.weight"],
        "transformer.x_embedder.lora_B.bias": sd["img_in.lora_B.bias"],
        **{
            f"transformer.transformer_blocks.0.attn.{names[n]}.weight": sd[
                f"double_blocks.0.img_attn.norm.{n}.scale"
            ]
            for n in names
        },
        **{
            f"transformer.transformer_blocks.0.attn.{a}.weight": sd[
                f"double_blocks.0.txt_attn.norm.{n}.scale"
            ]
            for n, a in (("query_norm", "norm_added_q"), ("key_norm", "norm_added_k"))
        },
        **{
            f"transformer.single_transformer_blocks.0.attn.{names[n]}.weight": sd[
                f"single_blocks.0.norm.{n}.scale"
            ]
            for n in names
        },
    }
    qkv = "double_blocks.0.img_attn.qkv"
    for i, name in enumerate(("to_q", "to_k", "to_v")):
        rows = slice(i * HIDDEN, (i + 1) * HIDDEN)
        hf[f"transformer.transformer_blocks.0.attn.{name}.lora_A.weight"] = sd[f"{qkv}.lora_A.weight"]
        hf[f"transformer.transformer_blocks.0.attn.{name}.lora_B.weight"] = sd[f"{qkv}.lora_B.weight"][rows]
        hf[f"transformer.transformer_blocks.0.attn.{name}.lora_B.bias"] = sd[f"{qkv}.lora_B.bias"][rows]
    write_safetensors(tmp_path / "hf.safetensors", hf)
    weights = []
    for name in ("bfl", "hf"):
        loaded = _model(tmp_path)
        stack = LoraStack([loaded])
        entry = stack.add(tmp_path / f"{name}.safetensors", 0.7)
        assert not entry.report.unmatched and not entry.report.shape_mismatches and not entry.skipped
        stack.apply()
        weights.append(loaded.module.state_dict())
    assert weights[0].keys() == weights[1].keys()
    for key, value in weights[0].items():
        torch.testing.assert_close(weights[1][key], value, rtol=0, atol=1e-6, msg=key)
