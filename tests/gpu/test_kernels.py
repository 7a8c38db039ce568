"""Kernels on the card: the SDXL VAE decodes 1024x1024 in bf16 to finite pixels and falls back to
tiles when the whole decode runs out of memory; every attention shape of the families runs with
the math kernel excluded (flash / memory-efficient / cuDNN only: the math kernel's T^2 scores are
what the activation model assumes away); NVML agrees with nvidia-smi."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from core.memory.devices import nvidia_device
from core.memory.probes import TorchCudaProbe
from core.models.attention import attention
from core.models.vae import AutoencoderKL as VAE
from core.models.vae import VAEConfig
from tests.gpu.helpers import CUDA, random_weights

pytestmark = pytest.mark.gpu

# (family part, heads, query tokens, key tokens, head dim) at 1024x1024 (SD1.5 at 512x512)
SHAPES = [
    ("sd1 self", 8, 4096, 4096, 40), ("sd1 cross", 8, 4096, 77, 40),
    ("sdxl self", 10, 4096, 4096, 64), ("sdxl cross", 20, 1024, 77, 64),
    ("flux joint", 24, 4608, 4608, 128), ("sd3 joint", 24, 4250, 4250, 64),
    ("clip", 12, 77, 77, 64), ("clip-g", 20, 77, 77, 64), ("t5", 64, 512, 512, 64),
    ("vae mid", 1, 16384, 16384, 512),
]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("name", "heads", "lq", "lk", "d"), SHAPES, ids=[s[0] for s in SHAPES])
def test_attention_runs_without_the_math_kernel(
    name: str, heads: int, lq: int, lk: int, d: int, dtype: torch.dtype
) -> None:
    q = torch.randn(1, lq, heads * d, device=CUDA, dtype=dtype)
    k = torch.randn(1, lk, heads * d, device=CUDA, dtype=dtype)
    with sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    ):
        out = attention(q, k, k, heads)
    assert out.shape == q.shape and torch.isfinite(out).all()


@pytest.fixture(scope="module")
def sdxl_vae() -> VAE:
    vae = VAE(VAEConfig.sd("sdxl"), device="meta")
    random_weights(vae, torch.bfloat16)
    return vae.to(CUDA).eval()


def test_sdxl_vae_decodes_1024_in_bf16_to_finite_pixels(sdxl_vae: VAE) -> None:
    z = torch.randn(1, 4, 128, 128, device=CUDA, dtype=torch.bfloat16)
    with torch.inference_mode():
        pixels = sdxl_vae.decode(z, scaled=False)
    assert pixels.shape == (1, 3, 1024, 1024) and torch.isfinite(pixels).all()


def test_the_decode_falls_back_to_tiles_when_the_card_runs_out(sdxl_vae: VAE) -> None:
    z = torch.randn(1, 4, 128, 128, device=CUDA, dtype=torch.bfloat16)
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    used = torch.cuda.memory_allocated()
    torch.cuda.set_per_process_memory_fraction((used + 1.5 * 2**30) / total)  # weights + 1.5 GiB
    try:
        with torch.inference_mode():
            with pytest.raises(torch.OutOfMemoryError):
                sdxl_vae.decode(z, scaled=False)
            pixels = sdxl_vae.decode_tiled(z, scaled=False)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert pixels.shape == (1, 3, 1024, 1024) and torch.isfinite(pixels).all()


def test_nvml_agrees_with_nvidia_smi() -> None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi is not on this machine")
    props = torch.cuda.get_device_properties(0)
    probe = TorchCudaProbe(nvidia_device(0, props.name, props.total_memory, (props.major, props.minor)))
    line = subprocess.run(
        [smi, "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    used_mib, total_mib = (int(x) for x in line.split(","))
    assert abs(probe.device_used() / 2**20 - used_mib) <= 64, (probe.device_used() / 2**20, used_mib)
    assert abs(props.total_memory / 2**20 - total_mib) <= 1024
