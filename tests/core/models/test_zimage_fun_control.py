"""Z-Image's Fun ControlNet (core/archs/nextdit/fun_control.py) against diffusers'
``ZImageControlNetModel`` + ``ZImageTransformer2DModel`` wired as ComfyUI computes
(tests/core/generate/reference_zimage_control.py), random weights, fp32: at the released width
(3840) the first release's form (one joint block, a control block), at a small width the 2.x forms
(two refiners of each kind, two joint blocks, two control blocks, 33 hint channels: 2.1's refiner
control blocks and 2.0's zeroed ones, for which the main control blocks stand in)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.archs.conditioning import Conditioning
from core.archs.control import ControlInput, InpaintHint
from core.archs.nextdit.controlnets import build_fun_control
from core.archs.nextdit.fun_control import ZImageFunControl
from core.errors import ModelMismatchError
from core.files.writer import write_safetensors
from core.generate.controlnet import check_fits
from core.loading.controlnet import LoadedControlNet, load_controlnet
from core.loading.loader import inspect_for_loading
from core.models.patches import NO_PATCHES, NetworkPatches, PatchPoints, Site, StageInput
from core.models.vae import FLUX_LATENT
from tests.core.generate.reference import vae_pair
from tests.core.generate.reference_nextdit import ours_from, z_image_reference
from tests.core.generate.reference_zimage_control import control_reference, controlled_velocity

pytestmark = pytest.mark.usefixtures("one_thread")


def _ours(cn: Any, *, zero_refiner: bool = False) -> ZImageFunControl:
    """Ours from diffusers' state (the file's names are diffusers'); 2.0's stand-in: the
    released file's refiner control blocks, zeroed."""
    state = {k: v for k, v in cn.state_dict().items() if k.startswith(("control_", "control_all"))}
    if zero_refiner:
        for i in range(len(cn.noise_refiner)):
            for name, tensor in cn.control_layers[min(i, 1)].state_dict().items():
                state[f"control_noise_refiner.{i}.{name}"] = torch.zeros_like(tensor)
    module = build_fun_control({k: tuple(v.shape) for k, v in state.items()})
    assert isinstance(module, ZImageFunControl)
    module.places = tuple(range(len(module.control_layers)))  # a control block after each joint block
    module.load_state_dict(state, assign=True, strict=True)
    return module.eval()


def _run(ours: Any, module: ZImageFunControl, x: torch.Tensor, sigma: torch.Tensor, ctx: torch.Tensor,
         hint: torch.Tensor, scale: float) -> torch.Tensor:  # fmt: skip
    inp = ControlInput(x, sigma, Conditioning(ctx), sigma, hint)
    with torch.no_grad():
        out: torch.Tensor = ours(x, sigma, ctx, module.control(inp).scaled(scale).patches())
    return out


def _compare(got: torch.Tensor, want: torch.Tensor, plain: torch.Tensor, name: str) -> None:
    err, top = float((got - want).abs().max()), float(want.abs().max())
    moved = float((want - plain).abs().max())
    print(
        f"{name}: max |ours - diffusers| = {err:.1e} (|out| <= {top:.2f}, the control moves it {moved:.2f})"
    )
    assert got.shape == want.shape
    assert moved > 0.05 * top and err < 1e-4 * top


def _inputs(dim_cap: int, in_dim: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 16, 16, 16, generator=gen)  # 64 picture tokens: no pads
    ctx = torch.randn(2, 32, dim_cap, generator=gen)
    hint = torch.randn(1, in_dim, 16, 16, generator=gen)
    return x, torch.tensor([0.93, 0.41]), ctx, hint


@pytest.mark.slow
def test_the_first_release_at_its_width_matches_diffusers() -> None:
    hf = z_image_reference(layers=1, refiners=0, cap=256)
    cn = control_reference(hf, layers=1, in_dim=16, refiner=None, refiners=0)
    ours, module = ours_from(hf), _ours(cn)
    x, sigma, ctx, hint = _inputs(256, 16, seed=3)
    want = controlled_velocity(hf, cn, x, sigma, list(ctx), hint, 0.75)
    with torch.no_grad():
        plain = ours(x, sigma, ctx, NO_PATCHES)
    _compare(_run(ours, module, x, sigma, ctx, hint, 0.75), want, plain, "1.0 at 3840")


@pytest.fixture(scope="module")
def small() -> Any:
    hf = z_image_reference(dim=256, heads=2, layers=2, refiners=2, cap=64)
    return hf, ours_from(hf)


@pytest.mark.parametrize("mode", ["control_noise_refiner", "control_layers", None])
def test_the_releases_forms_match_diffusers(small: Any, mode: str | None) -> None:
    hf, ours = small
    in_dim = 16 if mode is None else 33
    cn = control_reference(hf, layers=2, in_dim=in_dim, refiner=mode, refiners=2)
    module = _ours(cn, zero_refiner=mode == "control_layers")
    assert module.refiner_control == (mode is not None) and module.broken == (mode == "control_layers")
    x, sigma, ctx, hint = _inputs(64, in_dim, seed=4)
    want = controlled_velocity(hf, cn, x, sigma, list(ctx), hint, 0.6)
    with torch.no_grad():
        plain = ours(x, sigma, ctx, NO_PATCHES)
    _compare(_run(ours, module, x, sigma, ctx, hint, 0.6), want, plain, f"{mode} at 256")


def test_strength_scales_and_outputs_chain(small: Any) -> None:
    """Strength 0 leaves the output as it was; two outputs apply one after the other (each adds
    its hints: the control blocks see the stage's input, not the other's additions)."""
    hf, ours = small
    cn = control_reference(hf, layers=2, in_dim=16, refiner=None, refiners=2)
    module = _ours(cn)
    x, sigma, ctx, hint = _inputs(64, 16, seed=6)
    inp = ControlInput(x, sigma, Conditioning(ctx), sigma, hint)
    with torch.no_grad():
        plain = ours(x, sigma, ctx, NO_PATCHES)
        zero = ours(x, sigma, ctx, module.control(inp).scaled(0.0).patches())
        one = ours(x, sigma, ctx, module.control(inp).scaled(0.5).patches())
        two = ours(
            x, sigma, ctx, module.control(inp).scaled(0.25).merged(module.control(inp).scaled(0.25)).patches()
        )
    assert torch.equal(zero, plain)
    torch.testing.assert_close(two, one, rtol=1e-5, atol=1e-5)
    for mode in (None, "control_noise_refiner"):  # the same patches run twice (a guidance's extra pass)
        form = _ours(
            control_reference(hf, layers=2, in_dim=16 if mode is None else 33, refiner=mode, refiners=2)
        )
        hint = torch.randn(1, form.in_channels, 16, 16)
        patches = form.control(ControlInput(x, sigma, Conditioning(ctx), sigma, hint)).patches()
        with torch.no_grad():
            assert torch.equal(ours(x, sigma, ctx, patches), ours(x, sigma, ctx, patches))


def test_a_wrong_hint_and_a_wrong_network_are_refused_in_words(small: Any) -> None:
    hf, _ = small
    module = _ours(control_reference(hf, layers=2, in_dim=33, refiner="control_noise_refiner", refiners=2))
    x, sigma, ctx, _ = _inputs(64, 33, seed=7)
    with pytest.raises(ModelMismatchError, match="33 latent channels"):
        module.control(ControlInput(x, sigma, Conditioning(ctx), sigma, torch.zeros(1, 16, 16, 16)))
    wide = z_image_reference(dim=384, heads=3, layers=1, refiners=2, cap=64)
    inp = ControlInput(x, sigma, Conditioning(ctx), sigma, torch.zeros(1, 33, 16, 16))
    with pytest.raises(ModelMismatchError, match="256 wide and the model 384"):
        ours_from(wide)(x, sigma, ctx, module.control(inp).patches())


def test_the_stream_points_see_the_stages_and_change_nothing_unpatched(small: Any) -> None:
    """After each noise refiner (the picture's tokens, from 0) and each joint block (the joint
    sequence: the picture after the 32 caption tokens); a patch that returns what it got leaves
    the output bit-identical."""
    _, ours = small
    x, sigma, ctx, _ = _inputs(64, 16, seed=9)
    seen: list[tuple[str, int, tuple[int, int], int]] = []

    def record(h: torch.Tensor, site: Site, stage: StageInput) -> torch.Tensor:
        assert stage.first.shape == h.shape and stage.pe.shape[2] == h.shape[1]
        seen.append((site.stage, site.index, stage.image, h.shape[1]))
        return h

    with torch.no_grad():
        plain = ours(x, sigma, ctx, NO_PATCHES)
        same = ours(x, sigma, ctx, NetworkPatches(streams=(record,)))
    assert torch.equal(same, plain)
    picture, joint = ("noise_refiner", (0, 64), 64), ("joint", (32, 64), 96)
    assert seen == [(s, i, im, n) for s, im, n in (picture, joint) for i in range(2)]
    assert ours.patch_points().streams == ("noise_refiner", "joint")


def test_a_saved_file_detects_loads_and_runs(tmp_path: Path, small: Any) -> None:
    hf, ours = small
    cn = control_reference(hf, layers=2, in_dim=33, refiner="control_noise_refiner", refiners=2)
    state = {k: v for k, v in cn.state_dict().items() if k.startswith("control_")}
    path = write_safetensors(tmp_path / "Z-Image-Turbo-Fun-Controlnet-Union-2.1.safetensors", state)
    _, det = inspect_for_loading(path)
    assert (det.kind, det.family, det.layout) == ("controlnet", "z-image", "fun")
    assert det.fields["control_blocks"] == 2 and det.fields["hint_channels"] == 33
    loaded = load_controlnet(path)
    module = loaded.module
    assert isinstance(module, ZImageFunControl) and module.places == (0, 15)
    assert module.refiner_control and not module.broken and loaded.family == "z-image"
    module.places = (0, 1)
    x, sigma, ctx, hint = _inputs(64, 33, seed=10)
    torch.testing.assert_close(
        _run(ours, module, x, sigma, ctx, hint, 0.6), _run(ours, _ours(cn), x, sigma, ctx, hint, 0.6)
    )
    damaged = write_safetensors(
        tmp_path / "damaged.safetensors", {k: v for k, v in state.items() if "w3" not in k}
    )
    with pytest.raises(ModelMismatchError, match="does not match"):
        load_controlnet(damaged)


def test_the_2x_hint_is_the_control_a_zero_mask_and_a_grey_pictures_latent(small: Any) -> None:
    """ComfyUI's ``encode_latent_cond`` with no picture to inpaint: [control, mask 0, grey]."""
    hf, _ = small
    module = _ours(control_reference(hf, layers=2, in_dim=33, refiner="control_noise_refiner", refiners=2))
    _, vae = vae_pair(16, FLUX_LATENT, seed=2)
    picture = torch.rand(1, 3, 64, 48, generator=torch.Generator().manual_seed(1))

    def encode(p: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out: torch.Tensor = vae.encode(p * 2 - 1)
        return out

    hint = module.latent_hint(picture, encode)
    assert hint.shape == (1, 33, 8, 6)
    assert torch.equal(hint[:, :16], encode(picture)) and not hint[:, 16].any()
    assert torch.equal(hint[:, 17:], encode(torch.full_like(picture, 0.5)))


def test_with_no_control_picture_the_control_part_is_a_grey_pictures_latent(small: Any) -> None:
    """ComfyUI's ``encode_latent_cond`` with ``inpaint_image`` and no ``image``: [grey, kept part,
    the picture greyed where repainted]; refused in words with nothing to inpaint and by 1.0's
    16-channel files."""
    hf, _ = small
    module = _ours(control_reference(hf, layers=2, in_dim=33, refiner="control_noise_refiner", refiners=2))
    _, vae = vae_pair(16, FLUX_LATENT, seed=2)
    gen = torch.Generator().manual_seed(3)
    picture = torch.rand(1, 3, 64, 48, generator=gen)
    keep = (torch.rand(1, 1, 64, 48, generator=gen) > 0.5).float()
    cells = (torch.rand(1, 1, 8, 6, generator=gen) > 0.5).float()

    def encode(p: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out: torch.Tensor = vae.encode(p * 2 - 1)
        return out

    hint = module.latent_hint(None, encode, InpaintHint(picture, keep, cells))
    assert hint.shape == (1, 33, 8, 6)
    assert torch.equal(hint[:, :16], encode(torch.full_like(picture, 0.5)))
    assert torch.equal(hint[:, 16:17], cells)
    assert torch.equal(hint[:, 17:], encode((picture - 0.5) * keep + 0.5))
    with pytest.raises(ModelMismatchError, match="no control picture and nothing to inpaint"):
        module.latent_hint(None, encode)
    first = _ours(control_reference(hf, layers=2, in_dim=16, refiner=None, refiners=2))
    with pytest.raises(ModelMismatchError, match="takes no picture to inpaint"):
        first.latent_hint(None, encode, InpaintHint(picture, keep, cells))


def test_a_fun_controlnet_fits_z_image_alone(small: Any) -> None:
    hf, _ = small
    module = _ours(control_reference(hf, layers=2, in_dim=16, refiner=None, refiners=2))
    net = LoadedControlNet(Path("Z-Image-Turbo-Fun-Controlnet-Union.safetensors"), "z-image", "fun", module)
    check_fits(net, "z-image")
    with pytest.raises(ModelMismatchError, match="is a ControlNet for z-image, and the model is lumina2"):
        check_fits(net, "lumina2")
    with pytest.raises(ModelMismatchError, match="control stream"):
        module.require_points(PatchPoints({"joint": 2}))
