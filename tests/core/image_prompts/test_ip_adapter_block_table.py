"""The block-selecting IP-Adapter weight types, the precise types and the "Mad Scientist" layer
weights: which UNet transformer (ComfyUI's ``transformer_index``) gets which weight and reads
which tokens, against a table read off ComfyUI_IPAdapter_plus's source (commit 9d076a3:
``ipadapter_execute``'s ``weight`` dicts, ``ipadapter_attention``'s ``uncond = cond; cond = cond * 0``
for the precise types and ``cond_alt = {3: ...}`` for a composition picture). Weight 0.7,
composition weight 0.4, boost 1.3. M: the positive rows read the picture and the negative rows
the empty one; S (swapped): the positive rows read zeros and the negative rows the picture; C:
the positive rows read the composition picture. A transformer not listed gets no image prompt."""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import LoadoutError
from core.generate.ip_weights import (
    COMPOSITION,
    MAIN,
    SWAPPED,
    BlockWeights,
    parse_layer_weights,
    show_layer_weights,
)

W, WC, B = 0.7, 0.4, 1.3
M, S, C = MAIN, SWAPPED, COMPOSITION
SD1_STYLE = (0, 1, 2, 3, 9, 10, 11, 12, 13, 14, 15)


def _all(n: int, w: float, role: int = M) -> dict[int, tuple[float, int]]:
    return {t: (w, role) for t in range(n)}


def _sd1_style(w: float, role: int = M) -> dict[int, tuple[float, int]]:
    return {t: (w, role) for t in SD1_STYLE}


#: (sdxl, BlockWeights arguments, {transformer: (weight, tokens)})
TABLE: list[tuple[str, bool, dict[str, Any], dict[int, tuple[float, int]]]] = [
    ("sdxl style", True, {"weight_type": "style transfer"}, {6: (W, M)}),
    ("sdxl composition", True, {"weight_type": "composition"}, {3: (W, M)}),
    ("sdxl strong style", True, {"weight_type": "strong style transfer"}, {**_all(11, W), 3: (0.0, M)}),
    ("sd1 style", False, {"weight_type": "style transfer"}, _sd1_style(W)),
    ("sd1 composition", False, {"weight_type": "composition"}, {4: (W * 0.25, M), 5: (W, M)}),
    ("sdxl s&c, 2 pictures", True,
     {"weight_type": "style and composition", "composition": WC, "composition_picture": True},
     {3: (WC, C), 6: (W, M)}),
    # IPAdapterAdvanced: one picture, the composition weight fixed at 1
    ("sdxl s&c, 1 picture", True, {"weight_type": "style and composition"}, {3: (1.0, M), 6: (W, M)}),
    ("sd1 s&c, 1 picture", False, {"weight_type": "style and composition", "composition": WC},
     {**_sd1_style(W), 4: (WC * 0.25, M), 5: (WC, M)}),
    ("sdxl strong s&c", True,
     {"weight_type": "strong style and composition", "composition": WC, "composition_picture": True},
     {**_all(11, W), 3: (WC, C)}),
    ("sd1 strong s&c", False, {"weight_type": "strong style and composition", "composition": WC},
     {**_all(16, W), 4: (WC, M), 5: (WC, M)}),
    # the weight type alone: the composition block at the weight; IPAdapterPreciseStyleTransfer: style_boost
    ("sdxl style precise", True, {"weight_type": "style transfer precise"}, {3: (W, S), 6: (W, M)}),
    ("sdxl style precise boost", True, {"weight_type": "style transfer precise", "boost": B},
     {3: (B, S), 6: (W, M)}),
    ("sd1 style precise boost", False, {"weight_type": "style transfer precise", "boost": B},
     {**_sd1_style(W), 4: (B * 0.25, S), 5: (B, S)}),
    ("sdxl composition precise", True, {"weight_type": "composition precise"},
     {**_all(11, W * 0.1, S), 3: (W, M), 6: (W, S)}),
    # IPAdapterPreciseComposition: composition_boost weighs every block but the composition one
    ("sdxl composition precise boost", True, {"weight_type": "composition precise", "boost": B},
     {**_all(11, B * 0.1, S), 3: (W, M), 6: (B, S)}),
    ("sd1 composition precise boost", False, {"weight_type": "composition precise", "boost": B},
     {**_sd1_style(B, S), 6: (B * 0.1, S), 7: (B * 0.1, S), 8: (B * 0.1, S), 4: (W * 0.25, M), 5: (W, M)}),
    # layer weights: each factor times the weight; they replace every type but the precise ones
    ("sdxl layers", True, {"weight_type": "linear", "layers": ((3, 2.5), (6, 1.0))},
     {3: (W * 2.5, M), 6: (W, M)}),
    ("sdxl layers over ease in", True, {"weight_type": "ease in", "layers": ((0, 0.5), (10, 2.0))},
     {0: (W * 0.5, M), 10: (W * 2.0, M)}),
    ("sdxl layers, style precise", True,
     {"weight_type": "style transfer precise", "layers": ((3, 2.5), (6, 1.0))},
     {3: (W * 2.5, S), 6: (W, M)}),
    ("sd1 layers, a repeat wins", False,
     {"weight_type": "linear", "layers": ((15, 1.0), (4, 0.5), (15, 3.0))},
     {4: (W * 0.5, M), 15: (W * 3.0, M)}),
]  # fmt: skip


def _stage(t: int, sdxl: bool) -> str:
    first_middle = 4 if sdxl else 6
    return "input" if t < first_middle else "middle" if t == first_middle else "output"


@pytest.mark.parametrize(("sdxl", "args", "expected"), [c[1:] for c in TABLE], ids=[c[0] for c in TABLE])
def test_each_transformer_gets_the_packs_weight_and_tokens(
    sdxl: bool, args: dict[str, Any], expected: dict[int, tuple[float, int]]
) -> None:
    n = 11 if sdxl else 16
    blocks = BlockWeights(weight=W, **args)
    ours = [blocks.at(t, _stage(t, sdxl), n) for t in range(n)]
    want = [expected.get(t, (0.0, M)) for t in range(n)]
    assert [role for _, role in ours] == [role if w else M for w, role in want]
    assert [w for w, _ in ours] == pytest.approx([w for w, _ in want], abs=1e-9)


def test_token_sets_are_carried_only_for_the_types_that_read_them() -> None:
    assert BlockWeights("style transfer", 1.0).roles == 1
    assert BlockWeights("style and composition", 1.0).roles == 1
    assert BlockWeights("style and composition", 1.0, composition_picture=True).roles == 3
    assert BlockWeights("composition precise", 1.0).roles == 3


def test_layer_weights_read_as_the_pack_writes_them() -> None:
    assert parse_layer_weights("3:2.5, 6:1") == ((3, 2.5), (6, 1.0))
    assert parse_layer_weights(" 0:0.5,\n10 : -1,") == ((0, 0.5), (10, -1.0))
    assert show_layer_weights(((3, 2.5), (6, 1.0))) == "3:2.5,6:1"


@pytest.mark.parametrize(
    "text", ["", "3", "3:2.5 6:1", "3:2.5;6:1", "x:1", "3:x", "3.5:1", "-1:1", "3:inf", ","]
)
def test_malformed_layer_weights_are_refused_in_words(text: str) -> None:
    with pytest.raises(LoadoutError) as err:
        parse_layer_weights(text)
    assert err.value.code == "bad_argument" and "3:2.5, 6:1" in str(err.value.fix)


def test_a_composition_picture_on_sd15_and_a_layer_past_the_unet_are_refused() -> None:
    two = BlockWeights("style and composition", 1.0, composition_picture=True)
    with pytest.raises(LoadoutError, match="needs SDXL"):
        two.check(16, "ip-adapter_sd15.safetensors")
    two.check(11, "ip-adapter_sdxl.safetensors")
    with pytest.raises(LoadoutError, match="transformer 11"):
        BlockWeights("linear", 1.0, layers=((3, 1.0), (11, 1.0))).check(11, "ip-adapter_sdxl.safetensors")
    BlockWeights("linear", 1.0, layers=((15, 1.0),)).check(16, "ip-adapter_sd15.safetensors")
