"""Guidance patches as text: asked for by name with ComfyUI's node defaults, written into the A1111
parameters as ``Guidance patches: ...`` and read back from them (a dropped picture); bad text is
refused in words."""

from __future__ import annotations

import pytest

from core.errors import LoadoutError
from core.generate.parameters import GenerationParameters, format_parameters, parse_parameters
from core.guidance import PATCHES, describe_all, parse_patch, read_patches
from core.guidance.cfg_level import Apg
from core.guidance.perturbed import Pag, Slg
from core.guidance.unet_level import DeepShrink, FreeUV2


def test_names_defaults_and_values() -> None:
    assert parse_patch("pag") == Pag(scale=3.0)
    assert parse_patch("pag:3.5") == parse_patch("pag:scale=3.5") == Pag(scale=3.5)
    assert parse_patch("freeu_v2") == FreeUV2(b1=1.3, b2=1.4, s1=0.9, s2=0.2)
    assert parse_patch("slg:double_layers=3,4,scale=2") == Slg(double_layers=(3, 4), scale=2.0)
    assert parse_patch("apg:momentum=0.5").momentum == 0.5 and Apg().norm_threshold == 5.0
    shrink = parse_patch("deep_shrink:downscale_after_skip=false,upscale_method=bislerp")
    assert shrink == DeepShrink(downscale_after_skip=False, upscale_method="bislerp")
    names = "pag sag freeu freeu_v2 rescale_cfg cfg_zero_star apg epsilon_scaling slg deep_shrink cfg_norm"
    assert set(PATCHES) == set(names.split())


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("pga", "no guidance patch named 'pga'"),
        ("pag:strength=2", "has no parameter 'strength'"),
        ("pag:scale=200", "must be a number from 0 to 100"),
        ("freeu:b1=x", "cannot be 'x'"),
        ("deep_shrink:downscale_method=lanczos", "one of bicubic"),
        ("deep_shrink:downscale_after_skip=maybe", "true or false"),
    ],
)
def test_bad_text_is_refused_in_words(text: str, words: str) -> None:
    with pytest.raises(LoadoutError, match=words):
        parse_patch(text)


def test_the_png_parameters_carry_the_patches_and_read_them_back() -> None:
    patches = (parse_patch("pag:scale=2.5"), parse_patch("freeu_v2"), parse_patch("slg:double_layers=7,8"))
    text = format_parameters(GenerationParameters("a harbour", patches=patches))
    assert 'Guidance patches: "pag(scale=2.5), freeu_v2(b1=1.3,b2=1.4,s1=0.9,s2=0.2), slg(' in text
    back = parse_parameters(text)
    assert back.patches == patches and "Guidance patches" not in back.extra
    assert read_patches(describe_all(patches)) == patches
    broken = parse_parameters(text.replace("pag(scale=2.5)", "pag(scale=900)"))
    assert broken.patches == () and "Guidance patches" in broken.ignored
