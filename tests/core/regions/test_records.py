"""The region records, their text forms and their resolution to latent cells (the parts the goldens
do not reach: a family of 16 pixels per cell, a larger stage, JSON round trips, refusals)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.errors import LoadoutError
from core.regions import Box, Region, box_area, mask_bounds, negative_copies
from core.regions.text import parse_region, regions_from_json, regions_to_json
from core.sampling.cond_entry import CondEntry, LatentArea


def test_a_line_reads_pixels_fractions_strength_and_steps() -> None:
    assert parse_region("0,0,256,512:0.8@0-0.6= a red hat ") == Region(
        "a red hat", Box(0, 0, 256, 512), strength=0.8, end=0.6
    )
    assert parse_region("0.5,0,0.5,1=sea") == Region("sea", Box(0.5, 0.0, 0.5, 1.0, fractions=True))
    assert parse_region("8,8,64,64@0.25-1=a=b").prompt == "a=b"  # the first "=" ends the box


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("0,0,64,64", "is not a region"),
        ("0,0,64,x=a", "is not a number"),
        ("0,0,64,64:11=a", "out of range"),
        ("0,0,64.5,64=a", "fraction of the picture 64.5 is out of range"),  # a decimal point: fractions
        ("0,0,0,64=a", "is empty"),
        ("-8,0,64,64=a", "not in whole pixels"),
    ],
)
def test_bad_lines_are_refused_in_words(text: str, words: str) -> None:
    with pytest.raises(LoadoutError, match=words):
        parse_region(text)


def test_json_round_trips_and_takes_masks_from_the_files_folder(tmp_path: Path) -> None:
    regions = (
        Region("a", Box(0, 8, 64, 32), strength=1.5, start=0.2, end=0.9),
        Region("b", Box(0.25, 0.25, 0.5, 0.5, fractions=True)),
        Region("c", mask=Path("/masks/c.png"), mask_bounds=True),
    )
    assert regions_from_json(regions_to_json(regions)) == regions
    read = regions_from_json('[{"prompt": "d", "mask": "m.png"}]', tmp_path)
    assert read == (Region("d", mask=tmp_path / "m.png"),)
    for bad, words in (
        ('{"prompt": "d"}', "not a JSON list"),
        ('[{"prompt": "d", "box": [1, 2]}]', "four numbers"),
    ):
        with pytest.raises(LoadoutError, match=words):
            regions_from_json(bad)


def test_boxes_in_cells_follow_the_stride_and_the_stage() -> None:
    box = Box(72, 40, 100, 60)
    assert box_area(box, (512, 256), (32, 64)) == LatentArea(7, 12, 5, 9)  # 8 pixels a cell: // 8
    assert box_area(box, (512, 256), (16, 32)) == LatentArea(3, 6, 2, 4)  # FLUX.2's 16 pixels a cell
    assert box_area(box, (512, 256), (64, 128)) == LatentArea(15, 25, 10, 18)  # a 2x hires stage
    frac = Box(0.3, 0.5, 0.01, 0.5, fractions=True)
    assert box_area(frac, (512, 256), (32, 64)) == LatentArea(16, 1, 16, 19)  # max(1, round(f * cells))


def test_mask_bounds_and_the_negative_copies() -> None:
    mask = torch.zeros(1, 16, 16)
    mask[0, 3:6, 10:12] = 0.5
    assert mask_bounds(mask) == LatentArea(8, 8, 3, 10)  # at least 8 cells a side
    assert mask_bounds(torch.zeros(1, 16, 16)) == LatentArea(8, 8, 0, 0)
    area = LatentArea(8, 8, 0, 0)
    entries = (CondEntry(None, area, 0.5), CondEntry(None, area, 2.0), CondEntry(None, None, 1.0, mask))
    assert negative_copies(entries) == (
        CondEntry(None, area, 0.5),
    )  # one copy an area; none for a plain mask


def test_regions_outside_the_picture_are_refused_by_the_settings() -> None:
    from core.generate.request import ImageSettings

    with pytest.raises(LoadoutError, match="reaches outside the 512x512 picture"):
        ImageSettings("p", regions=(Region("a", Box(256, 0, 512, 64)),))
    with pytest.raises(LoadoutError, match="mask bounds"):
        Region("a", Box(0, 0, 8, 8), mask=Path("m.png"), mask_bounds=True)
    with pytest.raises(LoadoutError, match="neither a box nor a mask"):
        Region("a")


def test_region_texts_are_read_in_range_or_refused_in_words() -> None:
    """Seeded random lines, JSON and picture items: a region in range, or a LoadoutError."""
    import contextlib
    import json
    import random

    from core.generate.parameters import parse_parameters
    from core.values import REGION_PERCENT, REGION_STRENGTH

    rng = random.Random(32)
    atoms = ["0", "8", "64", "0.5", "1.0", "-1", "1e999", "nan", "9" * 400, "", "x", ",", ":", "@", "-", "="]
    numbers: list[object] = [0, 8, 64, 0.5, 1.0, -1, 10**400, 1e308, True, None, "8", [], {}]
    for _ in range(400):
        line = "".join(rng.choice(atoms) for _ in range(rng.randrange(1, 14))) + rng.choice(["", "=a boat"])
        try:
            r = parse_region(line)
        except LoadoutError:
            continue
        assert r.prompt.strip() and REGION_STRENGTH.problem(r.strength) is None
        assert REGION_PERCENT.problem(r.start) is None and REGION_PERCENT.problem(r.end) is None
    keys = ["prompt", "box", "fractions", "mask", "strength", "mask_bounds", "start", "end", "colour"]
    texts = ["[" * 5000 + "]" * 5000, "{}", "[1]", "nan"]
    for _ in range(300):
        item = {
            rng.choice(keys): rng.choice([*numbers, [rng.choice(numbers) for _ in range(4)], "a"])
            for _ in range(5)
        }
        texts.append(json.dumps([item]))
    for text in texts:
        with contextlib.suppress(LoadoutError):
            regions_from_json(text)
        p = parse_parameters(f"a\nSteps: 20, Regions: {json.dumps(text)}")  # never raises: ignored with why
        assert p.regions or "Regions" in p.ignored or text in ("[]",)
