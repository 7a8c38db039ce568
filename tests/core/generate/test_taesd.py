"""TAESD previews: the decoder against diffusers' AutoencoderTiny with the same weights, the file
found where ComfyUI keeps it, a damaged file refused in plain words."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from core.errors import LoadoutError
from core.generate.taesd import find_taesd, load_taesd, tiny_decoder
from tests.fixtures.demo_copy import DemoAt

diffusers = pytest.importorskip("diffusers")


def _reference() -> tuple[object, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    ref = diffusers.AutoencoderTiny(latent_channels=4).eval()
    # the release's file: our Sequential's index 0 is the clamp, diffusers applies it in forward
    ours = {}
    for k, v in ref.decoder.state_dict().items():
        i, rest = k.removeprefix("layers.").split(".", 1)
        ours[f"{int(i) + 1}.{rest}"] = v.clone()
    return ref, ours


def test_the_decoder_equals_diffusers_autoencoder_tiny(tmp_path: Path) -> None:
    ref, state = _reference()
    folder = tmp_path / "ComfyUI" / "models" / "vae_approx"
    folder.mkdir(parents=True)
    save_file(state, str(folder / "taesd_decoder.safetensors"))
    path = find_taesd("sd1", [tmp_path / "elsewhere", folder])
    assert path == folder / "taesd_decoder.safetensors"
    assert find_taesd("sdxl", [folder]) is None and find_taesd("flux-dev", [folder]) is None
    preview = load_taesd(path)
    z = torch.randn(2, 4, 6, 5, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = ((ref.decoder(z)[0] + 1) / 2).clamp(0, 1)  # diffusers maps [0, 1] to [-1, 1]
    rgb = preview.rgb(z)
    assert rgb.shape == (48, 40, 3)
    assert (torch.from_numpy(rgb).permute(2, 0, 1).float() - theirs * 255).abs().max() <= 0.51


def test_a_damaged_decoder_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "taesd_decoder.safetensors"
    save_file({"x": torch.zeros(1)}, str(bad))
    with pytest.raises(LoadoutError, match="not a TAESD decoder"):
        load_taesd(bad)
    assert len(tiny_decoder().state_dict()) == 67  # the release's tensor count


def test_generation_previews_through_taesd_when_the_decoder_is_beside_the_models(
    tmp_path: Path, demo_library_at: DemoAt
) -> None:
    import shutil

    from core.generate.command import generate_files
    from core.generate.events import GenerateProgress
    from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling

    demo = demo_library_at(tmp_path / "demo")
    _, state = _reference()
    approx = demo.checkpoint.parent.parent / "vae_approx"  # models/vae_approx, as in ComfyUI
    approx.mkdir()
    save_file(state, str(approx / "taesd_decoder.safetensors"))
    previews: list = []

    def progress(p: GenerateProgress) -> None:
        if p.preview is not None:
            previews.append(p.preview)

    request = GenerateRequest(
        ModelFiles(checkpoint=demo.checkpoint),
        ImageSettings("x", sampling=Sampling(steps=2), width=64, height=64),
        output=tmp_path / "o.png",
    )
    generate_files(request, progress=progress)
    assert [p.shape for p in previews] == [(64, 64, 3)] * 2  # TAESD's full-size previews
    shutil.rmtree(approx)
    previews.clear()
    generate_files(request, progress=progress)
    assert [p.shape for p in previews] == [(8, 8, 3)] * 2  # without it: the linear map, one pixel per latent


def test_the_preview_decodes_where_the_latent_is() -> None:
    """A latent on the compute device is decoded there (``meta`` stands in for the card): only
    the uint8 picture would come back. The CPU decoder itself is not moved."""
    from core.generate.taesd import TaesdPreview, tiny_decoder

    decoder = tiny_decoder(4, 8)
    preview = TaesdPreview(decoder)
    pixels = preview.pixels(torch.zeros(1, 4, 4, 4, device="meta"))
    assert pixels.device.type == "meta" and pixels.shape == (3, 32, 32) and pixels.dtype == torch.uint8
    assert all(p.device.type == "cpu" for p in decoder.parameters())
    assert preview.decoder_on(torch.device("meta")) is preview.decoder_on(torch.device("meta"))  # once
    assert preview.rgb(torch.zeros(1, 4, 4, 4)).shape == (32, 32, 3)
