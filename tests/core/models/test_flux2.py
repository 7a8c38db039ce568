"""The FLUX.2 transformer against diffusers' ``Flux2Transformer2DModel`` (test-only reference).

Random diffusers weights converted with our key map, identical inputs, fp32: the released head
width (128, four rotary axes of 32, theta 2000, MLP ratio 3) with 4 heads, two double and two single
blocks, klein's form (no guidance embedder) and dev's. (klein 4B at its full 3072 width is 560M
parameters for one double and one single block: 2.2 GB per copy, past this suite's memory budget.)
Files: the same weights in the original (BFL / ComfyUI) and diffusers layouts go through detection
and the public loader. Full size: the released shapes of klein 4B / 9B and dev, on the meta device,
against diffusers'.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.archs.flux2.keys import flux2_key_map
from core.files.writer import write_safetensors
from core.loading.convert.dit_diffusers import convert_shapes
from core.loading.loader import inspect_for_loading, load_diffusion_model
from core.models.flux2 import Flux2, Flux2Config, image_ids, image_tokens, text_ids
from tests.core.generate.reference_flux2 import flux2_reference, ours_from

pytestmark = pytest.mark.usefixtures("one_thread")

HEADS, CONTEXT = 4, 384


def _inputs(batch: int, h: int, w: int, tokens: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 128, h, w, generator=gen)
    ctx = torch.randn(batch, tokens, CONTEXT, generator=gen)
    return x, ctx, torch.tensor([0.93, 0.41][:batch]), torch.tensor([4.0, 2.5][:batch])


def _ours(model: Flux2, x: torch.Tensor, ctx: torch.Tensor, t: torch.Tensor, g: torch.Tensor | None) -> Any:
    b, _, h, w = x.shape
    with torch.no_grad():
        return model(image_tokens(x), image_ids(b, h, w), ctx, text_ids(b, ctx.shape[1]), t, g)


def _theirs(hf: Any, x: torch.Tensor, ctx: torch.Tensor, t: torch.Tensor, g: torch.Tensor | None) -> Any:
    """diffusers' call as its pipelines make it: ids (T, H, W, L) with text on L."""
    h, w = x.shape[-2:]
    with torch.no_grad():
        return hf(
            hidden_states=image_tokens(x), encoder_hidden_states=ctx, timestep=t, guidance=g,
            img_ids=image_ids(1, h, w)[0], txt_ids=text_ids(1, ctx.shape[1])[0], return_dict=False,
        )[0]  # fmt: skip


@pytest.fixture(scope="module")
def pair() -> dict[str, tuple[Any, Flux2]]:
    klein = flux2_reference(heads=HEADS, context=CONTEXT, double=2, single=2, seed=1)
    dev = flux2_reference(heads=HEADS, context=CONTEXT, double=2, single=2, guidance=True, seed=2)
    return {"klein": (klein, ours_from(klein)), "dev": (dev, ours_from(dev))}


@pytest.mark.parametrize("form", ["klein", "dev"])
def test_matches_diffusers(pair: dict[str, tuple[Any, Flux2]], form: str) -> None:
    hf, ours = pair[form]
    assert ours.config == Flux2Config(
        context_in_dim=CONTEXT, hidden_size=512, num_heads=HEADS, depth=2, depth_single_blocks=2,
        guidance_embed=form == "dev",
    )  # fmt: skip
    x, ctx, t, g = _inputs(2, 5, 7, 11, seed=3)
    guidance = g if form == "dev" else None
    got, want = _ours(ours, x, ctx, t, guidance), _theirs(hf, x, ctx, t, guidance)
    err, top = float((got - want).abs().max()), float(want.abs().max())
    print(f"{form}: max |ours - diffusers| = {err:.1e} (|out| <= {top:.2f})")
    assert got.shape == want.shape == (2, 35, 128)
    assert top > 0.05 and err < 1e-4 * top


def test_dev_without_guidance_is_a_clear_error(pair: dict[str, tuple[Any, Flux2]]) -> None:
    _, ours = pair["dev"]
    x, ctx, t, _ = _inputs(1, 2, 2, 3, seed=4)
    with pytest.raises(Exception, match="needs a guidance value"):
        _ours(ours, x, ctx, t, None)


@pytest.mark.parametrize("layout", ["original", "diffusers"])
def test_a_saved_file_detects_loads_and_runs(
    tmp_path: Path, pair: dict[str, tuple[Any, Flux2]], layout: str
) -> None:
    hf, ours = pair["klein"]
    state = dict(ours.state_dict()) if layout == "original" else dict(hf.state_dict())
    path = write_safetensors(tmp_path / f"flux2-{layout}.safetensors", state)
    _, det = inspect_for_loading(path)
    assert (det.kind, det.family) == ("diffusion_model", "flux2-klein-4b")
    assert det.components[0].layout == layout
    loaded = load_diffusion_model(path)
    assert isinstance(loaded.module, Flux2) and loaded.family == "flux2-klein-4b"
    x, ctx, t, _ = _inputs(1, 3, 4, 5, seed=5)
    assert torch.equal(_ours(loaded.module, x, ctx, t, None), _ours(ours, x, ctx, t, None))


@pytest.mark.parametrize(
    ("preset", "heads", "double", "single", "context", "guidance", "billions"),
    [
        ("klein_4b", 24, 5, 20, 7680, False, 3.88),
        ("klein_9b", 32, 8, 24, 12288, False, 9.08),
        ("dev", 48, 8, 48, 15360, True, 32.22),
    ],
)
def test_full_size_shapes_are_the_released_ones(
    preset: str, heads: int, double: int, single: int, context: int, guidance: bool, billions: float
) -> None:
    """diffusers' full-size model converts onto exactly our network's tensors, whose shapes read
    back as the preset."""
    import diffusers

    config: Flux2Config = getattr(Flux2Config, preset)()
    ours = Flux2(config, device="meta")
    shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert Flux2Config.from_shapes(shapes) == config
    with torch.device("meta"):
        hf = diffusers.Flux2Transformer2DModel(
            num_layers=double, num_single_layers=single, num_attention_heads=heads,
            joint_attention_dim=context, guidance_embeds=guidance,
        )  # fmt: skip
    rows = flux2_key_map(double, single, guidance)
    assert convert_shapes({k: tuple(v.shape) for k, v in hf.state_dict().items()}, rows) == shapes
    params = sum(v.numel() for v in ours.state_dict().values())
    print(f"{preset}: {params / 1e9:.2f}B parameters")
    assert round(params / 1e9, 2) == billions


def test_a_gguf_file_loads_quantized_and_runs(tmp_path: Path, pair: dict[str, tuple[Any, Flux2]]) -> None:
    """ComfyUI-GGUF's layout (the original keys, ``general.architecture`` flux2, Q8_0): detected,
    kept quantized, and computing what the same network computes with the dequantized weights."""
    from core.quant.tensor import QuantizedWeight
    from tests.fixtures.gguf_quant import write_comfy_gguf

    _, ours = pair["klein"]
    path, reference, _ = write_comfy_gguf(
        tmp_path / "flux-2-klein-4b-Q8_0.gguf", "flux2", ours.state_dict(), "Q8_0"
    )
    loaded = load_diffusion_model(path)
    assert isinstance(loaded.module, Flux2) and loaded.family == "flux2-klein-4b"
    state = loaded.module.state_dict(keep_vars=True)
    assert any(isinstance(v, QuantizedWeight) and v.qtype == "Q8_0" for v in state.values())
    baked = Flux2(ours.config, device="meta")
    baked.load_state_dict({k: v.float() for k, v in reference.items()}, assign=True, strict=True)
    x, ctx, t, _ = _inputs(1, 3, 4, 5, seed=9)
    got, want = _ours(loaded.module, x, ctx, t, None), _ours(baked.eval(), x, ctx, t, None)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)
