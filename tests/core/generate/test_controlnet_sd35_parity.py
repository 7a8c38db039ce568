"""Stability's SD3.5 Large ControlNet (``sd3.5_large_controlnet_canny.safetensors``'s layout) against
diffusers' ``SD3ControlNetModel`` in its SD3.5 form (picture-only blocks, the file diffusers'
conversion script makes of it) at SD3.5 Large's width (2432: 38 heads of 64), fp32, random weights.

Set up as ComfyUI computes: the ControlNet embeds the latent with the *base* network's
``x_embedder`` plus ComfyUI's own sin-cos grid (linspace -7.5..7.5 along the shorter side, centred
at 7.5); diffusers' pipeline hands it the base network's cropped position table instead. Block
``i``'s output is repeated ``ceil(38 / blocks)`` times and reaches every base block, the last too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from core.archs.control import ControlInput
from core.archs.mmdit.control_output import JointResiduals
from core.archs.mmdit.controlnet import SD35ControlNet, sd35_counts
from core.errors import LoadoutError
from core.loading.controlnet import load_controlnet
from core.models.vae import SD3_LATENT
from core.sampling.conditioning import Conditioning
from tests.core.generate.reference import randomize
from tests.core.generate.sd3_controlnet_pair import (
    comfy_sincos,
    diffusers_file,
    sd35_controlnet,
    stability_file,
    stability_state,
)
from tests.fixtures.st_files import write_tensors

diffusers = pytest.importorskip("diffusers")
pytestmark = pytest.mark.usefixtures("one_thread")

POOLED = 48


class Base(nn.Module):
    """The part of the base MMDiT the SD3.5 ControlNet borrows."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.x_embedder = nn.Module()
        self.x_embedder.proj = nn.Conv2d(16, hidden, 2, stride=2)
        randomize(self, 41)


def _inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 16, 6, 10, generator=g)
    t = torch.tensor([910.0, 130.0])
    return x, t, torch.randn(2, POOLED, generator=g), torch.randn(1, 16, 6, 10, generator=g)


def _rel(a: Any, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def _compare(hf: Any, path: Path, hidden: int) -> tuple[JointResiduals, list[torch.Tensor]]:
    loaded = load_controlnet(path)
    module = loaded.module
    assert isinstance(module, SD35ControlNet)
    base = Base(hidden)
    module.take_from_base(base)
    x, t, pooled, hint = _inputs()
    with torch.no_grad():
        tokens = base.x_embedder.proj(x).flatten(2).transpose(1, 2) + comfy_sincos(hidden, 5, 3)
        want = hf(tokens, hint.expand(2, -1, -1, -1), 1.0, None, pooled, t, return_dict=False)[0]
        got = module.control(ControlInput(x, t, Conditioning(torch.zeros(2, 1, 8), pooled), t / 1000, hint))
    assert isinstance(got, JointResiduals)
    return got, list(want)


def test_outputs_equal_diffusers_at_sd35_large_width(tmp_path: Path) -> None:
    hf = sd35_controlnet(38, 1, pooled=POOLED, seed=42)
    path = stability_file(hf, tmp_path / "sd3.5_large_controlnet_canny.safetensors")
    loaded = load_controlnet(path)
    assert (loaded.family, loaded.layout) == ("sd3.5-large", "original")
    got, want = _compare(hf, path, 2432)
    assert len(got.outputs) == 38 and all(o is got.outputs[0] for o in got.outputs)  # every base block
    assert _rel(got.outputs[0], want[0]) < 1e-4


def test_blocks_feed_each_other_and_repeat_as_comfyui(tmp_path: Path) -> None:
    hf = sd35_controlnet(4, 3, pooled=POOLED, seed=43)  # 256 wide: depth 4, ceil(4 / 3) = 2 each
    got, want = _compare(hf, stability_file(hf, tmp_path / "narrow.safetensors", None), 256)
    assert sd35_counts(256, 3) == [2, 2, 2] and sd35_counts(2432, 19) == [2] * 19
    assert len(got.outputs) == 6
    for i in range(3):
        assert got.outputs[2 * i] is got.outputs[2 * i + 1]
        assert _rel(got.outputs[2 * i], want[i]) < 1e-4


@pytest.mark.parametrize(
    ("kind", "shaped"), [(1, lambda p: p * 127.5 + 0.5), (2, lambda p: 1 - p), (0, None)]
)
def test_hints_are_shaped_by_the_file_control_type(tmp_path: Path, kind: int, shaped: Any) -> None:
    """ComfyUI's ``load_controlnet_sd35``: canny pictures scaled, depth inverted, blur as it is;
    then SD3's latent format with its shift (unlike the joint-block nets)."""
    hf = sd35_controlnet(4, 1, pooled=POOLED, seed=44)
    module = load_controlnet(stability_file(hf, tmp_path / f"t{kind}.safetensors", kind)).module
    pixels = torch.rand(1, 3, 16, 16)
    want = pixels if shaped is None else shaped(pixels)
    assert torch.equal(module.hint_pixels(pixels), want)
    z = torch.randn(1, 16, 2, 2)
    assert torch.equal(module.hint_latent(z, SD3_LATENT), SD3_LATENT.process_in(z))


def test_unloadable_forms_are_refused_in_words(tmp_path: Path) -> None:
    hf = sd35_controlnet(4, 1, pooled=POOLED, seed=45)
    with pytest.raises(LoadoutError) as err:  # diffusers' conversion of it: ComfyUI loads none either
        load_controlnet(diffusers_file(hf, tmp_path / "diffusers.safetensors"))
    assert err.value.code == "unsupported_family" and "diffusers-sd3.5" in str(err.value)
    state = stability_state(hf, 2)
    for i in (0, 2):  # ComfyUI's double_y_emb kind: the pooled text embedded twice
        state[f"time_text_embed.text_embedder.linear_{i + 1}.weight"] = torch.zeros(256, 256)
    with pytest.raises(LoadoutError) as err:
        load_controlnet(write_tensors(tmp_path / "double.safetensors", state))
    assert err.value.code == "layout_mismatch" and "double_y_emb" in str(err.value)
    module = load_controlnet(stability_file(hf, tmp_path / "ok.safetensors")).module
    x, t, pooled, hint = _inputs()
    with pytest.raises(LoadoutError) as err:  # run before it was given its base's patch embedding
        module.control(ControlInput(x, t, Conditioning(torch.zeros(2, 1, 8), pooled), t / 1000, hint))
    assert err.value.code == "wrong_controlnet"
    with pytest.raises(LoadoutError) as err:  # a base of another width
        module.take_from_base(Base(128))
    assert err.value.code == "wrong_controlnet" and "SD3.5 Large" in str(err.value)


def test_the_released_layout_matches_at_full_size() -> None:
    """Stability's SD3.5 Large ControlNet header (19 blocks, 2432 wide, pooled 2048, control_type)
    builds and maps key for key and shape for shape, without any data."""
    from types import SimpleNamespace

    from core.archs.mmdit.controlnet_load import CONTROLNET
    from core.loading.assign import compare_layout, expected_layout
    from tests.fixtures.diffusion_layouts_mmdit import sd35_controlnet_stability

    shapes = sd35_controlnet_stability()
    module = CONTROLNET.build(shapes, SimpleNamespace(layout="original"))  # type: ignore[arg-type]
    assert isinstance(module, SD35ControlNet) and CONTROLNET.key_map is not None
    to_file = CONTROLNET.key_map(module)
    found = {k: shapes[v] for k, v in to_file.items()}
    assert compare_layout(expected_layout(module), found).ok and set(to_file.values()) == set(shapes)
    assert module.config.blocks == 19 and sd35_counts(2432, 19) == [2] * 19
