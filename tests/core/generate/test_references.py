"""Reference pictures (editing): each family's scaling rule as ComfyUI computes it (and as diffusers'
list for Kontext), the picture reader's refusals in words, and the PNG parameters that name the
pictures and are read back."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app.cli import main
from core.archs.catalog import REFERENCES, references_for
from core.archs.references import ReferenceScale
from core.errors import LoadoutError
from core.generate.parameters import GenerationParameters, format_parameters, parse_parameters
from core.generate.references import (
    PARAMETER,
    ReferencePass,
    ReferencePicture,
    ReferenceUse,
    convention_for,
    read_references,
    references_in,
    scale_picture,
    scaled_reference,
)
from core.generate.request import ImageSettings
from tests.fixtures.demo_copy import DemoAt

KLEIN = "flux2-klein-4b"


def _picture(path: Path, w: int, h: int, seed: int = 0) -> Path:
    rgb = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(path)
    return path


def test_kontext_picks_diffusers_and_comfyuis_preferred_size() -> None:
    from diffusers.pipelines.flux.pipeline_flux_kontext import PREFERRED_KONTEXT_RESOLUTIONS

    kontext = REFERENCES["kontext"]
    assert kontext.sizes == tuple(PREFERRED_KONTEXT_RESOLUTIONS)  # type: ignore[attr-defined]
    for w, h in ((640, 480), (480, 640), (1000, 1000), (1920, 1080), (300, 1200), (813, 611)):
        aspect = w / h
        _, want_w, want_h = min((abs(aspect - a / b), a, b) for a, b in PREFERRED_KONTEXT_RESOLUTIONS)
        assert kontext.scale(w, h) == ReferenceScale(want_w, want_h, "lanczos", crop=True)


def test_total_area_rules_are_comfyuis_arithmetic() -> None:
    qwen, flux2 = REFERENCES["qwen-edit"], REFERENCES["flux2"]
    for w, h in ((640, 480), (813, 611), (2000, 500), (1024, 1024)):
        by = math.sqrt(1024 * 1024 / (w * h))
        assert qwen.scale(w, h) == ReferenceScale(round(w * by / 8.0) * 8, round(h * by / 8.0) * 8, "area")
        assert flux2.scale(w, h) == ReferenceScale(round(w * by), round(h * by), "lanczos")
    assert (qwen.most, flux2.most, REFERENCES["kontext"].most) == (3, 10, 3)


def test_lanczos_scaling_is_pillows_on_the_8_bit_picture() -> None:
    rgb = np.random.default_rng(1).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    unit = torch.from_numpy(rgb).float().div(255.0).permute(2, 0, 1)[None]
    ours = scale_picture(unit, ReferenceScale(40, 24, "lanczos"))
    pil = Image.fromarray(rgb).resize((40, 24), resample=Image.Resampling.LANCZOS)
    assert torch.equal(
        (ours[0].permute(1, 2, 0) * 255).round().to(torch.uint8), torch.from_numpy(np.array(pil))
    )


def test_a_reference_is_cropped_to_the_vaes_multiple(tmp_path: Path) -> None:
    path = _picture(tmp_path / "r.png", 300, 200)
    (found,) = read_references((path,), KLEIN)
    rule = references_for(KLEIN)
    assert rule is not None
    scaled = scaled_reference(found, rule, 16)
    w, h = rule.scale(300, 200).width, rule.scale(300, 200).height
    assert scaled.shape == (1, 3, h // 16 * 16, w // 16 * 16)


def test_a_family_without_references_too_many_and_unreadable_pictures_are_refused(tmp_path: Path) -> None:
    path = _picture(tmp_path / "r.png", 64, 64)
    with pytest.raises(LoadoutError, match="takes no reference pictures") as err:
        read_references((path,), "sd1")
    assert err.value.code == "wrong_kind"
    with pytest.raises(LoadoutError, match="takes at most 10"):
        convention_for(KLEIN, 11)
    with pytest.raises(LoadoutError, match="no family takes more than 10"):
        ImageSettings("x", references=(path,) * 11)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a picture at all")
    with pytest.raises(LoadoutError, match="not a picture Loadout can read") as err:
        read_references((bad,), KLEIN)
    assert err.value.code == "not_an_image"
    with pytest.raises(LoadoutError, match="does not exist"):
        read_references((tmp_path / "gone.png",), KLEIN)


def test_the_png_parameters_name_each_reference_and_read_back(tmp_path: Path) -> None:
    a, b = _picture(tmp_path / "cat, sitting.png", 64, 64, 1), _picture(tmp_path / "dog.png", 64, 48, 2)
    found = read_references((a, b), KLEIN)
    made = ReferencePass(found, convention_for(KLEIN, 2))
    text = format_parameters(GenerationParameters("edit", extra=dict(made.contribution.parameters)))
    back = references_in(parse_parameters(text).extra)
    assert back == (
        ReferenceUse("cat sitting.png", found[0].sha256[:12]),
        ReferenceUse("dog.png", found[1].sha256[:12]),
    )
    assert isinstance(found[0], ReferencePicture) and PARAMETER in text


def test_the_cli_refuses_references_for_a_model_that_takes_none(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    demo_library_at: DemoAt,
) -> None:
    demo = demo_library_at(tmp_path / "demo")
    ref = _picture(tmp_path / "r.png", 64, 64)
    out = tmp_path / "out.png"
    code = main(["generate", str(demo.checkpoint), "--prompt", "x", "--size", "64x64", "--steps", "1",
                 "--reference", str(ref), "-o", str(out)])  # fmt: skip
    assert code != 0 and not out.exists()
    err = capsys.readouterr().err
    assert "takes no reference pictures" in err and "Traceback" not in err


def test_the_cli_flag_is_repeatable_and_becomes_the_requests_references(tmp_path: Path) -> None:
    from app.cli import build_parser
    from app.commands.generate_cmd import _request

    a, b = tmp_path / "a.png", tmp_path / "b.png"
    args = build_parser().parse_args(
        [
            "generate",
            "m.safetensors",
            "--prompt",
            "x",
            "--reference",
            str(a),
            "--reference",
            str(b),
            "-o",
            "o.png",
        ]
    )
    assert _request(args).image.references == (a, b)


def test_the_reference_tokens_get_activation_room(tmp_path: Path) -> None:
    """A 1 MP reference beside a 1024 x 1024 picture: a step's activations as for a 1024 x 2048
    picture (the measured model of the family), less the picture's own."""
    from core.generate.references import activation_room
    from core.memory.inference import Workload, activation_bytes

    (picture,) = read_references((_picture(tmp_path / "r.png", 256, 256),), KLEIN)
    rule, work = REFERENCES["flux2"], Workload(1024, 1024)
    room = activation_room(KLEIN, None, work, (picture,), rule)
    want = activation_bytes(KLEIN, Workload(1024, 2048), None) - activation_bytes(KLEIN, work, None)
    assert room == want > 0 and activation_room(KLEIN, None, work, (), rule) == 0


def test_a_kept_size_reference_is_only_cropped_and_says_so(tmp_path: Path) -> None:
    """``reference_own_size`` (``--keep-reference-size``): the picture as read, cropped to the VAE's
    multiple, never resampled; the family's count and wiring kept; the PNG says so; its activation
    room is the picture's own area. Without it the family's rule scales it."""
    from core.archs.references import OwnSize
    from core.generate.references import SIZE_PARAMETER, activation_room
    from core.memory.inference import Workload

    path = _picture(tmp_path / "r.png", 84, 52)
    (found,) = read_references((path,), "flux-kontext")
    kept = convention_for("flux-kontext", 1, own_size=True)
    assert isinstance(kept, OwnSize) and (kept.id, kept.most, kept.negative) == ("kontext", 3, True)
    scaled = scaled_reference(found, kept, 8)
    assert torch.equal(scaled, found.unit()[..., 2:50, 2:82])  # 84 x 52 -> 80 x 48 around the centre
    assert scaled_reference(found, convention_for("flux-kontext", 1), 8).shape[-2:] == (800, 1328)
    with pytest.raises(LoadoutError, match="takes at most 3"):
        convention_for("flux-kontext", 4, own_size=True)
    assert ReferencePass((found,), kept).contribution.parameters[SIZE_PARAMETER] == "own"
    assert (
        SIZE_PARAMETER
        not in ReferencePass((found,), convention_for("flux-kontext", 1)).contribution.parameters
    )
    work = Workload(1024, 1024)
    assert activation_room("flux", 3072, work, (found,), kept) < activation_room(
        "flux", 3072, work, (found,), convention_for("flux-kontext", 1)
    )


def test_a_picture_already_at_the_rules_size_passes_unchanged() -> None:
    """ComfyUI's scale nodes on a picture of the size they pick: the 8-bit Lanczos round trip of an
    unchanged size gives the picture back bit for bit (so a reference prepared at a Kontext
    preferred size, or at one megapixel for FLUX.2, is encoded as it is)."""
    rgb = np.random.default_rng(3).integers(0, 256, (48, 80, 3), dtype=np.uint8)
    unit = torch.from_numpy(rgb).float().div(255.0).permute(2, 0, 1)[None]
    assert torch.equal(scale_picture(unit, ReferenceScale(80, 48, "lanczos", crop=True)), unit)


def test_the_keep_size_flag_becomes_the_requests_setting() -> None:
    from app.cli import build_parser
    from app.commands.generate_cmd import _request

    base = ["generate", "m.safetensors", "--prompt", "x", "--reference", "a.png", "-o", "o.png"]
    assert _request(build_parser().parse_args(base)).image.reference_own_size is False
    kept = build_parser().parse_args([*base, "--keep-reference-size"])
    assert _request(kept).image.reference_own_size is True
