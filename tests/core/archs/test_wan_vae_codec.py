"""The Wan VAE codec apart from its numerics (test_wan_vae_parity): what detection calls both key
layouts (and that KL VAEs and Wan VAEs are never taken for each other), files refused in words
(a tensor missing, Wan 2.2's VAE, video input), the tiled decode against the whole one, the memory
a decode asks for, the preview fit, and a diffusers-layout file saved back in its own layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from core.archs.catalog import CODECS, codec_of
from core.archs.wan_vae.codec import TILE_LATENT, decode_bytes
from core.archs.wan_vae.keys import original_to_diffusers, wan_key_map
from core.archs.wan_vae.network import WanVAE, WanVAEConfig
from core.detect.types import Detection
from core.errors import LoadoutError, ModelMismatchError
from core.loading.loader import ModelBundle, inspect_for_loading, load_vae
from core.loading.save import save_checkpoint
from core.models.tiling import tiled_map
from core.ops.streaming import stream_layers, unstream_layers
from tests.core.ops import op_layers
from tests.fixtures import layouts_encoders as enc
from tests.fixtures.layouts_wan_vae import wan21_vae_original
from tests.fixtures.st_files import write_sparse, write_tensors

pytestmark = pytest.mark.usefixtures("one_thread")

#: a narrow Wan VAE (the real structure, base width 8) for what needs real weights and many runs
TINY = WanVAEConfig(base_dim=8, num_res_blocks=1)


def random_vae(cfg: WanVAEConfig = TINY, seed: int = 0) -> WanVAE:
    vae = WanVAE(cfg, device="meta").to_empty(device="cpu").eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if name.endswith("gamma"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p[0].numel() ** 0.5)
    return vae


def detect_file(path: Path) -> Detection:
    return inspect_for_loading(path)[1]


# -- detection -------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["original", "diffusers"])
def test_both_layouts_are_the_wan_vae_and_plan_clean(tmp_path: Path, layout: str) -> None:
    original = wan21_vae_original()
    shapes = (
        original if layout == "original" else {d: original[o] for d, o in wan_key_map(WanVAEConfig()).items()}
    )
    det = detect_file(write_sparse(tmp_path / "qwen_image_vae.safetensors", shapes))
    assert (det.kind, det.family) == ("vae", "vae-wan")
    [comp] = det.components
    assert (comp.layout, comp.family) == (layout, "vae-wan")
    assert det.variant == "wan2.1" and det.warnings == ()  # no family "vae-qwen-image" to be unsure of
    assert CODECS["wan-vae"].architecture.families == ("vae-wan",)


def test_kl_and_wan_vaes_are_never_taken_for_each_other(tmp_path: Path) -> None:
    for name, layout, family in (
        ("ae.safetensors", enc.vae_kl(16, quant_conv=False), "vae-flux"),
        ("sdxl_vae.safetensors", enc.vae_kl(4), "vae-sd"),
        ("diffusers_vae.safetensors", enc.vae_kl_diffusers(4), "vae-sd"),
        ("wan_2.1_vae.safetensors", wan21_vae_original(), "vae-wan"),
    ):
        det = detect_file(write_sparse(tmp_path / name, layout))
        assert (det.kind, det.family) == ("vae", family), name


# -- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["original", "diffusers"])
def test_a_file_missing_a_tensor_is_refused_in_words(tmp_path: Path, layout: str) -> None:
    state = random_vae().state_dict()
    if layout == "diffusers":
        state = original_to_diffusers(state, TINY)
    dropped = next(k for k in state if "middle.1" in k or "attentions.0" in k)
    path = write_tensors(
        tmp_path / f"partial_{layout}.safetensors", {k: v for k, v in state.items() if k != dropped}
    )
    with pytest.raises(ModelMismatchError) as err:
        load_vae(path)
    e = err.value
    assert e.code == "layout_mismatch" and path.name in e.message
    assert "missing" in f"{e.message} {e.why}"


def test_wan22_vae_is_refused_in_words(tmp_path: Path) -> None:
    path = write_sparse(tmp_path / "wan2.2_vae.safetensors", enc.wan_vae(48))
    with pytest.raises(ModelMismatchError) as err:
        load_vae(path)
    assert "Wan 2.2" in (err.value.why or "") and err.value.code == "layout_mismatch"


def test_video_input_is_refused_in_words() -> None:
    vae = random_vae()
    with pytest.raises(LoadoutError) as err:
        vae.decode(torch.zeros(1, 16, 2, 4, 4))
    assert err.value.code == "invalid_shape" and "single pictures" in (err.value.why or "")
    with torch.no_grad():  # one frame, 5-D as ComfyUI keeps it, is the same as the 4-D picture
        z = torch.randn(1, 16, 4, 4, generator=torch.Generator().manual_seed(1))
        assert torch.equal(vae.decode(z[:, :, None]), vae.decode(z))


@torch.no_grad()
def test_half_precision_runs_through_the_cast_layers() -> None:
    """fp32 weights, a bf16 latent: every layer (the causal convs' frame path, the RMS gains)
    casts at forward and the picture stays near the fp32 one."""
    vae = random_vae()
    z = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(5))
    full = vae.decode(z)
    half = vae.decode(z.bfloat16())
    assert half.dtype == torch.bfloat16 and next(vae.parameters()).dtype == torch.float32
    err = (half.float() - full).abs()  # bf16's 8 mantissa bits through ~20 layers: measured max 6%
    assert float(err.mean()) < 0.02 * float(full.std()) and float(err.max()) < 0.1 * float(full.abs().max())


@torch.no_grad()
def test_streamed_layers_give_the_resident_bits() -> None:
    """Every op layer streamed (what a partial load does on a small card): the frame path of the
    causal convs takes the streamed copies, and the picture is bit-identical."""
    vae = random_vae()
    z = torch.randn(1, 16, 4, 4, generator=torch.Generator().manual_seed(6))
    resident = vae.decode(z)
    names = op_layers(vae)
    streamed = stream_layers(vae, names, "cpu")
    try:
        out = vae.decode(z)
        used = streamed.stats.bytes_total
    finally:
        unstream_layers(vae, names)
    assert used > 0 and torch.equal(out, resident)


# -- tiles, memory, preview ------------------------------------------------------------------------


@torch.no_grad()
def test_tiled_decode_is_close_to_the_whole_one() -> None:
    vae = random_vae()
    codec = codec_of(vae)
    assert codec is not None and codec.id == "wan-vae"
    side = TILE_LATENT + 16  # two tiles along each side
    latent = torch.randn(1, 16, side, side, generator=torch.Generator().manual_seed(3))
    full = codec.decode(vae, latent)
    done: list[tuple[int, int]] = []
    tiled = codec.decode_tiled(vae, latent, lambda d, t: done.append((d, t)))
    assert done[-1] == (4, 4) and tiled.shape == full.shape == (1, 3, 8 * side, 8 * side)
    err = (tiled - full).abs()
    # a tile attends over itself only (the mid-block attention: every pixel of a tile moves a
    # little) and its convolutions see zeros past its edges: no tiled decode is exact. Measured on
    # random weights (seeds 0, 1): mean |err| 5.0% / 5.6% of the output's std, max |err| 17% / 19% of
    # its largest value; tiles butted without overlap 10% / 10% and 59% / 53%.
    assert float(err.mean()) <= 0.08 * float(full.std())
    assert float(err.max()) <= 0.25 * float(full.abs().max())
    butted = (tiled_map(latent, vae.decode, tile=TILE_LATENT, overlap=0, up=8) - full).abs()
    assert float(butted.mean()) >= 1.5 * float(err.mean()) and float(butted.max()) >= 2 * float(err.max())


def test_memory_a_decode_asks_for() -> None:
    vae = WanVAE(WanVAEConfig(), device="meta")
    codec = CODECS["wan-vae"]
    whole = codec.decode_bytes(vae, 1, 1024, 1024, torch.bfloat16)
    tiled = codec.tiled_decode_bytes(vae, 1, 1024, 1024, torch.bfloat16)
    # a tile is 256 px: far less than the whole picture, and the same as a 256 px decode
    assert tiled == codec.decode_bytes(vae, 1, 256, 256, torch.bfloat16) < whole / 10
    assert codec.decode_bytes(vae, 2, 1024, 1024, torch.float32) == 4 * whole
    # at least the largest activations (the 96-wide full-size maps, in and out of a block)
    assert whole >= 4 * 96 * 1024 * 1024 * 2
    assert decode_bytes(WanVAEConfig(), 1, 512, 512, torch.float16) < whole


@torch.no_grad()
def test_decode_bytes_cover_the_activations_it_makes() -> None:
    """The estimate is at least what a decode holds at its biggest step (a layer's input and
    output), found with forward hooks on the tiny VAE."""
    vae = random_vae()
    peak = [0]

    def hook(module: torch.nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        peak[0] = max(peak[0], args[0].nbytes + out.nbytes)

    handles = [m.register_forward_hook(hook) for m in vae.decoder.modules() if m is not vae.decoder]
    vae.decode(torch.randn(1, 16, 8, 8))
    for h in handles:
        h.remove()
    assert decode_bytes(TINY, 1, 64, 64, torch.float32) >= peak[0]


def test_preview_is_fitted_from_the_decoder() -> None:
    vae = random_vae()
    preview = CODECS["wan-vae"].preview(vae)
    assert preview.weight.shape == (16, 3) and torch.isfinite(preview.weight).all()
    assert preview.rgb(torch.zeros(1, 16, 4, 4)).shape == (4, 4, 3)


# -- saving ----------------------------------------------------------------------------------------


def test_a_diffusers_file_is_saved_back_in_its_own_layout(tmp_path: Path) -> None:
    state = original_to_diffusers(random_vae().state_dict(), TINY)
    src = write_tensors(tmp_path / "vae_diffusers.safetensors", state)
    comp = load_vae(src)
    assert comp.layout == "diffusers"
    bundle = ModelBundle(src, detect_file(src), {}, vae=comp)  # what a save of a loaded VAE writes
    out = save_checkpoint(bundle, tmp_path / "copy.safetensors")
    with safe_open(str(out), "pt") as f:
        assert set(f.keys()) == set(state)
        assert all(torch.equal(f.get_tensor(k), state[k]) for k in state)
