"""``loadout generate --diffusion-model flux1-dev.safetensors ... --controlnet FILE:HINT[:type=NAME]``
with FLUX.1 ControlNets as artists have them (small networks, the widths detection reads: CLIP-L
768, T5-XXL 4096): an InstantX union net (diffusers' ``FluxControlNetModel`` file, its hint
VAE-encoded) and an XLabs net (BFL's names, its own hint convolutions), through detection, the
loaders, the session and the CLI. The picture is the same bits on a simulated 4.6 MiB card (the
XLabs net streamed there) as without a limit, the union type reaches the net and the PNG names it.
Alimama's inpainting net (the InstantX layout, a 17-channel hint) repaints what ``--mask`` marks,
the same bits on the small card.
The composition itself is proven against diffusers in test_parity_flux_controlnet_pipeline.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import save_file
from torch import nn

from app.demo import TINY_CLIP
from core.archs.flux.controlnet import FluxControlConfig, FluxControlNet
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.workflows import ControlNetParameters, controlnets_in
from core.loading.architectures import CLIP, FLUX
from core.models.vae import FLUX_LATENT
from tests.core.generate.reference import randomize, t5_tokenizers, vae_pair
from tests.fixtures.cli_runs import flux_args, generate, refused
from tests.fixtures.controlnets import mask_picture
from tests.fixtures.drawn import landscape
from tests.fixtures.tiny_models import FLUX_DEV, TINY_T5, Tiny

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("sentencepiece")
pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

DEV = dataclasses.replace(FLUX_DEV, vec_in_dim=768, context_in_dim=4096)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("flux_cn")
    names = ("flux1-dev", "clip_l", "t5xxl", "ae", "union", "xlabs", "inpainting")
    out = {k: root / f"{k}.safetensors" for k in names}
    save_file(Tiny("flux-dev", FLUX, "flux-dev", DEV, seed=21).file_state(), str(out["flux1-dev"]))
    clip = Tiny("clip-l-full-vocabulary", CLIP, "clip-l", TINY_CLIP, seed=22, layout="transformers")
    save_file(clip.file_state(), str(out["clip_l"]))
    save_file(TINY_T5.file_state(), str(out["t5xxl"]))
    _, vae = vae_pair(16, FLUX_LATENT, seed=23)
    save_file({k: v.contiguous() for k, v in vae.state_dict().items()}, str(out["ae"]))
    union = diffusers.FluxControlNetModel(
        patch_size=1, in_channels=64, num_layers=1, num_single_layers=1, attention_head_dim=16,
        num_attention_heads=2, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
        axes_dims_rope=(8, 4, 4), num_mode=7,
    )  # fmt: skip
    save_file({k: v.contiguous() for k, v in randomize(union, 24).state_dict().items()}, str(out["union"]))
    union.controlnet_x_embedder = nn.Linear(17 * 4, 32)  # Alimama's: a mask channel beside the latent
    union.controlnet_mode_embedder = None
    save_file(
        {k: v.contiguous() for k, v in randomize(union, 26).state_dict().items()}, str(out["inpainting"])
    )
    # 19 double blocks (XLabs' files have 2): more weights than a 4.6 MiB card holds beside Flux
    deep = dataclasses.replace(DEV, depth=19, depth_single_blocks=0)
    xlabs = FluxControlNet(FluxControlConfig(deep, 64, pixels=True))
    save_file({k: v.contiguous() for k, v in randomize(xlabs, 25).state_dict().items()}, str(out["xlabs"]))
    t5_tokenizers(root / "t5_tokenizer")
    out["tokenizer"] = root / "t5_tokenizer"
    out["hint"] = landscape(root / "hint.png", 80, 64)
    out["init"] = landscape(root / "init.png", 64, 64)
    out["mask"] = mask_picture(root / "mask.png")
    return out


def _args(f: dict[str, Path], steps: int = 2) -> list[str]:
    return flux_args(f["flux1-dev"], f["clip_l"], f["t5xxl"], f["ae"], "a house", 5, steps=steps)


def _cli(f: dict[str, Path], out: Path, *extra: str) -> np.ndarray:
    return generate(_args(f), out, *extra).pixels


def test_flux_controlnets_from_the_command_line_on_any_card(
    files: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    plain = _cli(files, tmp_path / "plain.png")
    union = f"{files['union']}:{files['hint']}:0.9:type=depth"
    got = _cli(files, tmp_path / "union.png", "--controlnet", union)
    small = _cli(files, tmp_path / "union_small.png", "--controlnet", union, "--vram-limit", "4.6MiB")
    assert np.array_equal(got, small)
    assert np.abs(got - plain).max() > 2
    p = parse_parameters(read_png_parameters(tmp_path / "union.png"))
    assert controlnets_in(p.extra) == (ControlNetParameters("union", 0.9, 0.0, 1.0, control_type="depth"),)
    other = _cli(files, tmp_path / "canny.png", "--controlnet", union.replace("depth", "canny"))
    assert np.abs(other - got).max() > 0  # the type reaches the net

    xlabs = f"{files['xlabs']}:{files['hint']}"
    got = _cli(files, tmp_path / "xlabs.png", "--controlnet", xlabs)
    card = ("--controlnet", xlabs, "--vram-limit", "4.6MiB")
    small_run = generate(_args(files), tmp_path / "xlabs_small.png", *card, capsys=capsys)
    assert np.array_equal(got, small_run.pixels) and np.abs(got - plain).max() > 2
    streamed = [e for e in small_run.events if e["role"] == "controlnet" and e["kind"] == "partial_load"]
    assert streamed


def test_a_type_for_a_net_without_types_is_refused_in_words(
    files: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    typed = f"{files['xlabs']}:{files['hint']}:type=depth"
    err = refused(_args(files, steps=1), tmp_path / "x.png", capsys, "--controlnet", typed)
    assert "has no control types" in err


def test_alimamas_inpainting_net_repaints_the_mask_on_any_card(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    inpaint = ("--init", str(files["init"]), "--mask", str(files["mask"]), "--denoise", "1")
    plain = _cli(files, tmp_path / "plain.png", *inpaint)
    net = ("--controlnet", f"{files['inpainting']}:{files['init']}:0.9")
    got = _cli(files, tmp_path / "inpainting.png", *inpaint, *net)
    assert np.array_equal(got, _cli(files, tmp_path / "small.png", *inpaint, *net, "--vram-limit", "4.6MiB"))
    assert np.abs(got - plain).max() > 2
    p = parse_parameters(read_png_parameters(tmp_path / "inpainting.png"))
    assert controlnets_in(p.extra) == (ControlNetParameters("inpainting", 0.9, 0.0, 1.0),)
