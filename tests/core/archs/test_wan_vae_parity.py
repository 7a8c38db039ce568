"""The Wan 2.1 / Qwen-Image VAE against diffusers' ``AutoencoderKLQwenImage`` at the real width
(base dim 96, 16 latent channels, levels 1/2/4/4; one residual block per level instead of two, to
stay quick), random weights, fp32: one diffusers model written as real safetensors files in both
key layouts (diffusers', and the original Wan/ComfyUI one) and loaded through the project's loader;
encode (posterior mean) and decode to 1e-4. The original layout's names are checked at the real
config against diffusers' own single-file converter (``convert_wan_vae_to_diffusers``)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

from core.archs.catalog import codec_of
from core.archs.wan_vae.keys import diffusers_to_original, wan_key_map
from core.archs.wan_vae.network import WanVAE, WanVAEConfig
from core.detect.catalog import latent_format_for
from core.detect.spec import WAN21_LATENT
from core.loading.loader import load_vae
from tests.fixtures.st_files import write_tensors

diffusers = pytest.importorskip("diffusers")

SIZE = 32  # pixels per side: a 4x4 latent


def _random_reference(cls: type) -> torch.nn.Module:
    """A diffusers VAE with random weights of the usual scale (built on meta, filled once: no slow
    default init), RMS gains around 1 and small biases so every tensor matters."""
    with torch.device("meta"):
        model = cls(base_dim=96, z_dim=16, num_res_blocks=1)
    model = model.to_empty(device="cpu").eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / fan_in**0.5)
    return model


CONFIG = WanVAEConfig(num_res_blocks=1)


def test_original_names_are_those_of_diffusers_single_file_converter() -> None:
    """At the real config (the converter knows no other), every tensor of the module (the original
    layout) goes to the diffusers name diffusers' converter gives it, and that covers every tensor
    of ``AutoencoderKLQwenImage``: the key map is a bijection between the two layouts."""
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers

    originals = list(WanVAE(WanVAEConfig(), device="meta").state_dict())
    converted = convert_wan_vae_to_diffusers({k: torch.tensor(i) for i, k in enumerate(originals)})
    reference = {originals[int(v)]: k for k, v in converted.items()}
    assert {o: d for d, o in wan_key_map(WanVAEConfig()).items()} == reference
    with torch.device("meta"):
        model = diffusers.AutoencoderKLQwenImage(base_dim=96, z_dim=16)
    assert set(reference.values()) == set(model.state_dict())


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    ref = _random_reference(diffusers.AutoencoderKLQwenImage)
    state = ref.state_dict()
    root = tmp_path_factory.mktemp("wan_vae")
    diff = write_tensors(root / "qwen_image_vae_diffusers.safetensors", state)
    orig = write_tensors(root / "qwen_image_vae.safetensors", diffusers_to_original(state, CONFIG))
    g = torch.Generator().manual_seed(1)
    pixels = torch.rand(1, 3, SIZE, SIZE, generator=g) * 2 - 1
    latent = torch.randn(1, 16, SIZE // 8, SIZE // 8, generator=g)
    with torch.no_grad():
        mean = ref.encode(pixels[:, :, None]).latent_dist.mean[:, :, 0]
        picture = ref.decode(latent[:, :, None]).sample[:, :, 0]
    return {"diffusers": diff, "original": orig, "pixels": pixels, "latent": latent, "mean": mean,
            "picture": picture}  # fmt: skip


def rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float((ours - ref).abs().max() / ref.abs().max())


@pytest.mark.parametrize("layout", ["diffusers", "original"])
@torch.no_grad()
def test_encode_and_decode_match_diffusers(files: dict[str, object], layout: str) -> None:
    path = files[layout]
    assert isinstance(path, Path)
    comp = load_vae(path)
    assert (comp.family, comp.layout) == ("vae-wan", layout)
    vae = comp.module
    codec = codec_of(vae)
    assert codec is not None and codec.id == "wan-vae"
    assert (codec.downscale(vae), codec.channels(vae)) == (8, 16)
    assert vae.config == CONFIG  # read from the file's shapes
    mean = codec.encode(vae, files["pixels"])
    assert mean.shape == (1, 16, SIZE // 8, SIZE // 8)
    assert rel_err(mean, files["mean"]) < 1e-4
    picture = codec.decode(vae, files["latent"])
    assert picture.shape == (1, 3, SIZE, SIZE)
    ref = files["picture"]
    assert isinstance(ref, torch.Tensor) and float((ref.abs() == 1).float().mean()) < 0.05  # little clamped
    assert rel_err(picture.clamp(-1, 1), ref) < 1e-4  # diffusers clamps its output; the PNG writer does here


def test_wan_and_qwen_image_vaes_are_one_layout() -> None:
    """``AutoencoderKLWan`` (Wan 2.1's config) has exactly ``AutoencoderKLQwenImage``'s tensors: one
    key map and one network serve both (and the Comfy-Org files of both)."""
    with torch.device("meta"):
        wan = diffusers.AutoencoderKLWan(base_dim=96, z_dim=16).state_dict()
        qwen = diffusers.AutoencoderKLQwenImage(base_dim=96, z_dim=16).state_dict()
    assert {k: tuple(v.shape) for k, v in wan.items()} == {k: tuple(v.shape) for k, v in qwen.items()}


@pytest.mark.parametrize("cls", ["AutoencoderKLQwenImage", "AutoencoderKLWan"])
def test_latent_format_is_diffusers_latents_mean_and_std(cls: str) -> None:
    """``wan21`` carries the per-channel statistics of both diffusers configs (ComfyUI's Wan21 has
    the same numbers), and maps as ``(z - mean) / std`` and back (scale 1)."""
    params = inspect.signature(getattr(diffusers, cls).__init__).parameters
    fmt = latent_format_for("vae-wan")
    assert fmt is WAN21_LATENT and fmt.scale == 1.0
    assert list(fmt.mean or ()) == params["latents_mean"].default
    assert list(fmt.std or ()) == params["latents_std"].default
    z = torch.randn(2, 16, 3, 5, generator=torch.Generator().manual_seed(2))
    mean = torch.tensor(params["latents_mean"].default).view(1, 16, 1, 1)
    std = torch.tensor(params["latents_std"].default).view(1, 16, 1, 1)
    assert torch.allclose(fmt.process_in(z), (z - mean) / std)
    assert torch.allclose(fmt.process_out(fmt.process_in(z)), z, atol=1e-6)
