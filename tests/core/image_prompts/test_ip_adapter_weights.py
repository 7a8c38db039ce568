"""IP-Adapter's weight types and attention mask against ComfyUI_IPAdapter_plus.

The golden (``ipadapter_plus_golden.json``) was computed outside this repository by running the
node pack's own code (commit 9d076a3: ``ipadapter_execute``'s weight-type block and
``CrossAttentionPatch.ipadapter_attention``, ComfyUI's attention replaced by
``scaled_dot_product_attention``, identity key/value layers): for each weight type at weight 0.7,
the factor its attention output gets at each ``transformer_index`` (SD1.5: 16, SDXL: 11); for a
7x6 mask, the factor each query token gets for several latent sizes and token counts (the
resizing, rounding and padding of the pack). On the UNet, the transformer numbering (forward
order: input, middle, output) is checked against diffusers given each attention's scale from the
golden, and the mask's limits (all ones, all zeros) bit for bit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from core.generate.ip_adapter import AppliedIpAdapter, IpAttention, _Layer, _order
from core.generate.ip_weights import WEIGHT_TYPES, layer_weight, token_mask, transformer_numbers
from core.loading.ip_adapter import load_ip_adapter
from core.models.patches import NetworkPatches
from tests.core.image_prompts.ip_files import diffusers_state, ip_adapter_file, sdxl_unet_pair

GOLDEN = json.loads((Path(__file__).parent / "ipadapter_plus_golden.json").read_text())
#: the types the golden holds (the others: test_ip_adapter_block_table.py's table)
GOLDEN_TYPES = tuple(t for t in WEIGHT_TYPES if f"sd1/{t}" in GOLDEN["weights"])


def _stage(t: int, sdxl: bool) -> str:
    first_middle = 4 if sdxl else 6
    return "input" if t < first_middle else "middle" if t == first_middle else "output"


@pytest.mark.parametrize("sdxl", [False, True])
@pytest.mark.parametrize("weight_type", GOLDEN_TYPES)
def test_weight_types_equal_the_node_packs(weight_type: str, sdxl: bool) -> None:
    golden = GOLDEN["weights"][f"{'sdxl' if sdxl else 'sd1'}/{weight_type}"]
    ours = [layer_weight(weight_type, 0.7, t, _stage(t, sdxl), len(golden)) for t in range(len(golden))]
    assert ours == pytest.approx(golden, abs=1e-6)


def test_mask_per_token_equals_the_node_packs() -> None:
    mask = torch.tensor(GOLDEN["mask"])
    for case in GOLDEN["masks"]:
        ours = token_mask(mask, tuple(case["latent"]), case["tokens"])
        assert ours.tolist() == pytest.approx(case["factor"], abs=1e-5), case["latent"]


@pytest.fixture(scope="module")
def sdxl(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any, Path]:
    hf, ours = sdxl_unet_pair()
    path = ip_adapter_file(
        tmp_path_factory.mktemp("ipw") / "ip-adapter_sdxl_vit-h.safetensors", plus=False, sdxl=True
    )
    return hf, ours, load_ip_adapter(path), path


def _inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(3)
    x, ctx = torch.randn(2, 4, 8, 10, generator=g), torch.randn(2, 77, 2048, generator=g)
    return x, torch.tensor([600.0, 600.0]), ctx, torch.randn(2, 1024, generator=g)


def _ours(sdxl: tuple[Any, Any, Any, Path], weight_type: str, mask: torch.Tensor | None) -> torch.Tensor:
    _, unet, loaded, _ = sdxl
    x, t, ctx, embeds = _inputs()
    applied = AppliedIpAdapter(loaded, None, None, 0.7, (1e9, 0.0), weight_type, mask)  # type: ignore[arg-type]
    order = _order(applied, unet)
    with torch.no_grad():
        tokens = loaded.arch.project(loaded.module, embeds)
        patch = IpAttention((_Layer(applied, tokens, order, transformer_numbers(tuple(order))),), (8, 10))
        return unet(x, t, ctx, patches=NetworkPatches(attention=(patch,)))  # type: ignore[no-any-return]


def test_transformer_numbers_follow_the_forward_order_as_diffusers_scales_them(
    sdxl: tuple[Any, Any, Any, Path],
) -> None:
    """ "ease out" (a different weight at each transformer): diffusers with each attention's scale
    set to the pack's for its ``transformer_index``: input block 2 (down_blocks.1) is 0, the middle
    block 1, the output transformers (up_blocks.0) 2 and 3."""
    import copy

    hf, _, _, path = sdxl
    golden = GOLDEN["weights"]["sdxl/ease out"]
    numbers = {"down_blocks.1.attentions.0": 0, "mid_block.attentions.0": 1,
               "up_blocks.0.attentions.0": 2, "up_blocks.0.attentions.1": 3}  # fmt: skip
    unet = copy.deepcopy(hf)
    unet._load_ip_adapter_weights([diffusers_state(path)])
    scaled = 0
    for name, proc in unet.attn_processors.items():
        if hasattr(proc, "scale"):
            proc.scale = [golden[next(n for k, n in numbers.items() if name.startswith(k))]]
            scaled += 1
    assert scaled == 8
    x, t, ctx, embeds = _inputs()
    with torch.no_grad():
        theirs = unet(
            x, t, encoder_hidden_states=ctx, added_cond_kwargs={"image_embeds": [embeds[:, None]]}
        ).sample
    out, linear = _ours(sdxl, "ease out", None), _ours(sdxl, "linear", None)
    assert float((out - theirs).abs().max()) < 1e-4
    assert float((linear - theirs).abs().max()) > 1e-3  # the per-transformer weights reach the output


def test_mask_limits_and_a_type_that_leaves_every_transformer_out(sdxl: tuple[Any, Any, Any, Path]) -> None:
    _, unet, _, _ = sdxl
    x, t, ctx, _ = _inputs()
    with torch.no_grad():
        plain = unet(x, t, ctx)
    full = _ours(sdxl, "linear", None)
    assert torch.equal(_ours(sdxl, "linear", torch.ones(5, 7)), full)
    assert torch.equal(_ours(sdxl, "linear", torch.zeros(5, 7)), plain)
    half = torch.zeros(16, 20)
    half[:, :10] = 1
    masked = _ours(sdxl, "linear", half)
    assert float((masked - plain).abs().max()) > 1e-3 and float((masked - full).abs().max()) > 1e-3
    # SDXL "style transfer" is transformer 6 alone, which this 4-transformer UNet does not have
    assert torch.equal(_ours(sdxl, "style transfer", None), plain)
