"""X/Y/Z axes: parsing, checking, cells and their order."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import LoadoutError
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.patching.merge import LoraArg
from core.queue.grid import cells, parse_axis


def _request(tmp_path: Path, loras: tuple[LoraArg, ...] = ()) -> GenerateRequest:
    ck = tmp_path / "a.safetensors"
    ck.write_bytes(b"x")
    return GenerateRequest(
        ModelFiles(checkpoint=ck), ImageSettings("a red fox", sampling=Sampling(seed=5, cfg=7.0)), loras=loras
    )


def test_axes_are_typed_and_checked(tmp_path: Path) -> None:
    assert parse_axis("seed:1, 2,3").values == (1, 2, 3)
    assert parse_axis("cfg:4,7.5").values == (4.0, 7.5)
    assert parse_axis("sampler:euler,dpmpp_2m").values == ("euler", "dpmpp_2m")
    assert parse_axis("prompt-sr:red,blue,").values == ("red", "blue", "")  # an empty replacement removes
    for bad, words in [
        ("colour:1,2", "not an axis"), ("seed", "not an axis"), ("steps:0,4", "outside"),
        ("cfg:high", "not a number"), ("sampler:euler,warp", "unknown sampler"),
        ("checkpoint:/nope.safetensors", "does not exist"), ("prompt-sr:red", "values"),
        ("lora-strength:0.5,200", "LoRA strength"), ("lora-model-strength:nan", "LoRA strength"),
    ]:  # fmt: skip
        with pytest.raises(LoadoutError, match=words):
            parse_axis(bad)


def test_cells_apply_each_axis_value(tmp_path: Path) -> None:
    lora = LoraArg(tmp_path / "l.safetensors", 0.8, 0.5)
    base = _request(tmp_path, (lora,))
    grid = cells(
        base, parse_axis("prompt-sr:red,blue"), parse_axis("lora-model-strength:0,1"), parse_axis("cfg:3,9")
    )
    assert len(grid) == 8
    c = next(c for c in grid if (c.x, c.y, c.z) == (1, 1, 1))
    assert c.request.image.prompt == "a blue fox" and c.request.image.sampling.cfg == 9.0
    assert c.lora_strengths == (1.0, 0.5)  # the text-encoder strength stays the LoRA's
    assert c.request.loras == (lora,)  # the stack itself is unchanged: strengths are set live
    assert c.labels == ("blue", "l model 1", "cfg 9")  # the LoRA by its name
    both = cells(base, parse_axis("lora-strength:0.3,0.6"))
    assert [c.lora_strengths for c in both] == [(0.3, 0.3), (0.6, 0.6)]


def test_checkpoint_cells_come_together_so_each_loads_once(tmp_path: Path) -> None:
    base = _request(tmp_path)
    other = tmp_path / "b.safetensors"
    other.write_bytes(b"y")
    grid = cells(base, parse_axis(f"checkpoint:{base.models.checkpoint},{other}"), parse_axis("seed:1,2,3"))
    models = [c.request.models.checkpoint for c in grid]
    assert models == [base.models.checkpoint] * 3 + [other] * 3  # one swap, not five


def test_axes_that_cannot_apply_are_refused(tmp_path: Path) -> None:
    base = _request(tmp_path)
    with pytest.raises(LoadoutError, match="needs a LoRA"):
        cells(base, parse_axis("lora-strength:0,1"))
    with pytest.raises(LoadoutError, match="does not contain 'green'"):
        cells(base, parse_axis("prompt-sr:green,blue"))
    with pytest.raises(LoadoutError, match="twice"):
        cells(base, parse_axis("seed:1,2"), parse_axis("seed:3,4"))
