"""The demo library: a folder of real-layout model files, so a new user can click through at once.

Laid out like a ComfyUI install (``models/checkpoints``, ``models/loras``...), it holds:

- a tiny SD1-style checkpoint with real data (the real SD1 key names and network structure at a
  tiny width) that loads and runs in well under a second, its preview image and a LoRA for it;
- full-size real-layout files (SDXL, Flux, a VAE, text encoders, an SDXL LoRA) written *sparse*:
  true headers and shapes, the data area a hole that costs no disk. They browse and inspect like
  the real files but hold no weights, so the app refuses to load them (metadata ``demo.sparse``);
- a damaged download, to show how a bad file is reported.

Generated once per version into a per-user data folder (or the folder given); Qt-free apart from
:func:`default_demo_dir`.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from core.files.atomic import atomic_file, atomic_write_bytes
from core.files.writer import write_safetensors
from core.generate.events import GenerateResult
from core.loading.architectures import CLIP, FLUX, T5, UNET, VAE
from core.models.clip import CLIPTextConfig
from core.models.flux import FluxConfig
from core.models.t5 import T5Config
from core.models.unet import UNetConfig
from core.models.vae import SD1_LATENT, VAEConfig

DEMO_VERSION = 1
MARKER = ".loadout-demo.json"
SPARSE_META = {"demo.sparse": "true"}
TINY_CHECKPOINT = "models/checkpoints/loadout-demo-sd15-tiny.safetensors"
TINY_LORA = "models/loras/demo-inkwash-style-sd15.safetensors"

# --- the tiny SD1-style checkpoint ----------------------------------------------------------------
#: SD1's UNet structure at width 32: 768-wide context (8 heads, as SD1 is read from shapes), conv
#: proj_in, no label embedding, so detection calls it sd1 and the loader plans SD1's network.
TINY_UNET = UNetConfig.per_level(
    model_channels=32, channel_mult=(1, 2), num_res_blocks=1, level_depth=(1, 0),
    transformer_depth_middle=1, context_dim=768, num_heads=8, num_head_channels=None,
)  # fmt: skip
TINY_VAE = VAEConfig(
    latent_channels=4,
    use_quant_conv=True,
    base_channels=32,
    channel_mult=(1, 1, 2, 2),  # three downsamplings: 8x8 pixels per latent, as every SD VAE
    num_res_blocks=1,
    norm_groups=32,
).with_latent_format(SD1_LATENT)
#: CLIP-L's width (768, 12 heads, quick GELU) and its whole 49,408-token vocabulary (so real prompts
#: tokenize and the demo generates), two layers
TINY_CLIP = CLIPTextConfig(hidden_size=768, intermediate_size=64, num_layers=2, num_heads=12)
TINY_PARTS = (
    ("model.diffusion_model.", UNET, TINY_UNET, 1),
    ("first_stage_model.", VAE, TINY_VAE, 6),
    ("cond_stage_model.transformer.", CLIP, TINY_CLIP, 8),
)


def random_state(module: nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Seeded values that keep activations O(1): weights ~ 1/sqrt(fan-in), norms ~ 1, biases ~ 0."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for key, meta in module.state_dict().items():
        shape = tuple(meta.shape)
        if not meta.is_floating_point():
            out[key] = torch.zeros(shape, dtype=meta.dtype)
            continue
        noise = torch.randn(shape, generator=gen)
        if len(shape) >= 2:
            value = noise / math.sqrt(math.prod(shape[1:]))
        elif key.endswith(("weight", "scale")):
            value = 1.0 + 0.1 * noise
        else:
            value = 0.1 * noise
        out[key] = value.to(meta.dtype)
    return out


def tiny_checkpoint_tensors() -> dict[str, torch.Tensor]:
    """The tiny SD1-style checkpoint's tensors under their real prefixes, in fp16."""
    out: dict[str, torch.Tensor] = {}
    for prefix, arch, config, seed in TINY_PARTS:
        for key, value in random_state(arch.build(config, "meta", None), seed).items():
            out[prefix + key] = value.half() if value.is_floating_point() else value
    out["alphas_cumprod"] = torch.linspace(0.9999, 0.0047, 1000).half()  # fp32 here misaligns the mmap
    return out


def _lora_targets(module: nn.Module, prefix: str, suffixes: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """kohya module name -> (out, in) for the module's linear weights ending in ``suffixes``."""
    found = {}
    for key, value in module.state_dict().items():
        if key.endswith(suffixes) and value.dim() == 2:
            found[prefix + key[: -len(".weight")].replace(".", "_")] = (
                int(value.shape[0]),
                int(value.shape[1]),
            )
    return found


_UNET_ATTN = tuple(
    f"{a}.{p}.weight" for a in ("attn1", "attn2") for p in ("to_q", "to_k", "to_v", "to_out.0")
)
_CLIP_ATTN = tuple(f"self_attn.{p}.weight" for p in ("q_proj", "k_proj", "v_proj", "out_proj"))


def tiny_lora_tensors(rank: int = 4, seed: int = 11) -> dict[str, torch.Tensor]:
    """A kohya LoRA (attention of the UNet and the text encoder) for the tiny checkpoint."""
    targets = _lora_targets(UNET.build(TINY_UNET, "meta", None), "lora_unet_", _UNET_ATTN)
    targets |= _lora_targets(CLIP.build(TINY_CLIP, "meta", None), "lora_te_", _CLIP_ATTN)
    g = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for name, (n_out, n_in) in sorted(targets.items()):
        out[f"{name}.lora_down.weight"] = (torch.randn(rank, n_in, generator=g) / math.sqrt(n_in)).half()
        out[f"{name}.lora_up.weight"] = (torch.randn(n_out, rank, generator=g) * 0.5).half()
        out[f"{name}.alpha"] = torch.tensor(float(rank))
    return out


# --- sparse full-size files -------------------------------------------------------------------------
Layout = dict[str, tuple[int, ...]]
_BYTES = {"F32": 4, "F16": 2, "BF16": 2}


def module_layout(arch: object, config: object, layout: str = "original", family: str = "") -> Layout:
    """Key -> shape of a full-size network as a file stores it, built on the meta device."""
    module = arch.build(config, "meta", None)  # type: ignore[attr-defined]
    state = arch.convert_out(module.state_dict(), layout, family)  # type: ignore[attr-defined]
    return {k: tuple(v.shape) for k, v in state.items()}


def write_sparse(
    path: Path, layout: Layout, *, dtype: str = "F16", metadata: dict[str, str] | None = None
) -> None:
    """A valid safetensors file with the true shapes and a hole for a data area."""
    header: dict[str, object] = {"__metadata__": dict(metadata or {})}
    offset = 0
    for name, shape in layout.items():
        n = math.prod(shape) * _BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((-len(raw)) % 8)
    with atomic_file(path) as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)


def _prefixed(layout: Layout, prefix: str) -> Layout:
    return {prefix + k: v for k, v in layout.items()}


def sdxl_checkpoint_layout() -> Layout:
    d = _prefixed(module_layout(UNET, UNetConfig.sdxl()), "model.diffusion_model.")
    d |= _prefixed(module_layout(VAE, VAEConfig.sd("sdxl")), "first_stage_model.")
    d |= _prefixed(module_layout(CLIP, CLIPTextConfig.clip_l()), "conditioner.embedders.0.transformer.")
    d |= _prefixed(
        module_layout(CLIP, CLIPTextConfig.clip_g(), "open_clip", "clip-g"), "conditioner.embedders.1.model."
    )
    return d


def lora_layout(targets: dict[str, tuple[int, int]], rank: int) -> Layout:
    out: Layout = {}
    for name, (n_out, n_in) in sorted(targets.items()):
        out |= {f"{name}.lora_down.weight": (rank, n_in), f"{name}.lora_up.weight": (n_out, rank)}
        out[f"{name}.alpha"] = ()
    return out


def sdxl_lora_layout(rank: int = 32) -> Layout:
    targets = _lora_targets(UNET.build(UNetConfig.sdxl(), "meta", None), "lora_unet_", _UNET_ATTN)
    return lora_layout(targets, rank)


def flux_lora_layout(rank: int = 16) -> Layout:
    suffixes = ("img_attn.qkv.weight", "img_attn.proj.weight", "txt_attn.qkv.weight", "linear1.weight")
    return lora_layout(
        _lora_targets(FLUX.build(FluxConfig.dev(), "meta", None), "lora_unet_", suffixes), rank
    )


# --- preview images -----------------------------------------------------------------------------------
def write_png(path: Path, width: int, height: int, colors: tuple[tuple[int, int, int], ...]) -> None:
    """A small gradient PNG (no image library needed): ``colors`` are stops from top-left."""
    rows = []
    for y in range(height):
        row = bytearray([0])
        for x in range(width):
            t = (x / max(1, width - 1) + y / max(1, height - 1)) / 2 * (len(colors) - 1)
            i = min(int(t), len(colors) - 2)
            f = t - i
            a, b = colors[i], colors[i + 1]
            row += bytes(int(a[c] + (b[c] - a[c]) * f) for c in range(3))
        rows.append(bytes(row))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
    atomic_write_bytes(path, png + chunk(b"IEND", b""))


# --- the library ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DemoLibrary:
    folder: Path

    @property
    def checkpoint(self) -> Path:
        return self.folder / TINY_CHECKPOINT

    @property
    def lora(self) -> Path:
        return self.folder / TINY_LORA


def _write_all(root: Path) -> None:
    m = root / "models"
    ckpt = root / TINY_CHECKPOINT
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    title = {"modelspec.title": "Loadout demo SD1.5 (tiny)", "modelspec.architecture": "stable-diffusion-v1"}
    write_safetensors(ckpt, tiny_checkpoint_tensors(), title)
    write_png(
        ckpt.with_name(ckpt.stem + ".preview.png"), 96, 96, ((40, 60, 140), (200, 90, 160), (250, 200, 90))
    )
    lora = root / TINY_LORA
    lora.parent.mkdir(parents=True, exist_ok=True)
    lora_meta = {
        "ss_network_module": "networks.lora",
        "ss_base_model_version": "sd_v1",
        "modelspec.title": "Ink wash style (demo)",
        "modelspec.trigger_phrase": "inkwash style, sumi-e",
    }
    write_safetensors(lora, tiny_lora_tensors(), lora_meta)
    write_png(
        lora.with_name(lora.stem + ".preview.png"), 96, 96, ((20, 20, 24), (120, 120, 130), (235, 235, 225))
    )
    sdxl_meta = SPARSE_META | {"modelspec.title": "SDXL base (demo: real layout, no weights)"}
    write_sparse(
        m / "checkpoints/SDXL/sdxl-base-demo.safetensors", sdxl_checkpoint_layout(), metadata=sdxl_meta
    )
    flux = module_layout(FLUX, FluxConfig.schnell())
    write_sparse(
        m / "diffusion_models/flux1-schnell-demo.safetensors", flux, dtype="BF16", metadata=SPARSE_META
    )
    write_sparse(
        m / "vae/sdxl_vae-demo.safetensors", module_layout(VAE, VAEConfig.sd("sdxl")), metadata=SPARSE_META
    )
    clip_l = module_layout(CLIP, CLIPTextConfig.clip_l())
    write_sparse(m / "text_encoders/clip_l-demo.safetensors", clip_l, metadata=SPARSE_META)
    write_sparse(
        m / "text_encoders/t5xxl-demo_fp16.safetensors",
        module_layout(T5, T5Config.t5_xxl()),
        metadata=SPARSE_META,
    )
    detail = SPARSE_META | {"ss_network_module": "networks.lora", "modelspec.trigger_phrase": "hyperdetailed"}
    write_sparse(m / "loras/demo-detail-tweaker-sdxl.safetensors", sdxl_lora_layout(), metadata=detail)
    write_sparse(
        m / "loras/demo-film-grain-flux.safetensors", flux_lora_layout(), dtype="BF16", metadata=SPARSE_META
    )
    broken = m / "checkpoints/damaged-download.safetensors"
    atomic_write_bytes(
        broken, struct.pack("<Q", 4096) + b'{"__metadata__":{}, "model.diffusion_model.x": {"dtype":'
    )
    (root / "custom_nodes").mkdir(exist_ok=True)  # makes the folder read as a ComfyUI base folder


def ensure_demo_library(folder: Path | str | None = None) -> DemoLibrary:
    """The demo library in ``folder`` (default: :func:`default_demo_dir`), generated if missing
    or from an older version. Cheap when it is already there."""
    root = Path(folder) if folder is not None else default_demo_dir()
    marker = root / MARKER
    try:
        if (
            json.loads(marker.read_text()).get("version") == DEMO_VERSION
            and (root / TINY_CHECKPOINT).is_file()
        ):
            return DemoLibrary(root)
    except (OSError, ValueError, AttributeError):
        pass
    root.mkdir(parents=True, exist_ok=True)
    _write_all(root)
    atomic_write_bytes(marker, json.dumps({"version": DEMO_VERSION}).encode())
    return DemoLibrary(root)


def default_demo_dir() -> Path:
    """``<per-user data folder>/Loadout/demo-library`` (QStandardPaths), or ``~/.loadout`` without Qt."""
    try:
        from PySide6.QtCore import QStandardPaths

        base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.GenericDataLocation)
    except ImportError:
        base = ""
    return (Path(base) / "Loadout" if base else Path.home() / ".loadout") / "demo-library"


#: What a picture made with the demo's checkpoint says (the engine knows nothing of the demo).
DEMO_NOTE = "the demo's tiny models have random weights: their pictures look like noise"


def is_demo_model(path: Path) -> bool:
    return path.name.startswith("loadout-demo")


def with_demo_note(result: GenerateResult, model: Path | None) -> GenerateResult:
    """``result`` with the demo's note when it was made with the demo's checkpoint."""
    if model is None or not is_demo_model(model):
        return result
    return replace(result, notes=(*result.notes, DEMO_NOTE))


def is_sparse_demo(metadata: object) -> bool:
    return isinstance(metadata, dict) and metadata.get("demo.sparse") == "true"
