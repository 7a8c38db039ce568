"""A LoRA whose alpha lives only in its metadata (diffusers' writer) is applied at scale 1, as
ComfyUI applies it: every weight changes by exactly ``up @ down`` times the strength, not by the
trained ``alpha / r`` (ComfyUI #12191). The trained scale is only reported, on the stack's record."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.loading.loader import LoadedComponent
from core.patching.lora_stack import LoraStack

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("peft")
from diffusers.utils import convert_state_dict_to_diffusers  # noqa: E402

from core.loading.convert.unet_diffusers import unet_diffusers_to_original, unet_original_key_map  # noqa: E402
from core.models.unet import UNetModel  # noqa: E402
from tests.fixtures.keymap_peft import ALPHA, CASES, RANK, peft_unet  # noqa: E402


@pytest.mark.parametrize("strength", [1.0, 0.5])
def test_metadata_alpha_is_reported_and_applied_at_one_as_comfyui_does(
    tmp_path: Path, strength: float
) -> None:
    c = CASES["sd1-like"]
    ref = peft_unet(c)
    layers = {k.removeprefix("base_model.model."): v for k, v in ref.lora_state.items()}
    diffusers.StableDiffusionPipeline.save_lora_weights(
        tmp_path,
        unet_lora_layers=convert_state_dict_to_diffusers(layers),
        unet_lora_adapter_metadata=ref.model.peft_config["default"].to_dict(),
    )
    path = tmp_path / "pytorch_lora_weights.safetensors"

    ours = UNetModel(c.config).eval()
    ours.load_state_dict(unet_diffusers_to_original(ref.base_state, c.config), strict=True)
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    comp = LoadedComponent("diffusion_model", "sd1", "", "original", ours, c.config, None)  # type: ignore[arg-type]
    stack = LoraStack([comp])
    entry = stack.add(path, model_strength=strength, force=True)  # tiny widths: no family to check
    (trained,) = entry.analysis.summary.trained_scale
    assert (trained.component, trained.alpha, trained.rank, trained.scale) == (
        "unet",
        ALPHA,
        RANK,
        ALPHA / RANK,
    )
    assert trained.scale != 1.0
    stack.apply()

    to_original = unet_original_key_map(c.config)
    after = ours.state_dict()
    checked = 0
    for key, down in layers.items():
        if ".lora_A." not in key:
            continue
        up = layers[key.replace(".lora_A.", ".lora_B.")]
        target = to_original[key.replace(".lora_A.weight", ".weight")]
        w0 = before[target]
        delta = (strength * (up.flatten(1) @ down.flatten(1))).reshape(w0.shape)  # scale 1, not alpha / r
        torch.testing.assert_close(after[target] - w0, delta, rtol=1e-5, atol=1e-6)
        checked += 1
    assert checked == len(layers) // 2 == len(entry.report.matched)
