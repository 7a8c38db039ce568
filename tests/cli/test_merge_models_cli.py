"""``loadout merge A B [C]`` on the command line: the dry run (headers only, exit 2 on a refusal),
the merge on a simulated small card with --json, the recipe read back by ``loadout inspect``, and the
LoRA bake's form kept apart from it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from app.cli import main
from tests.core.merging.util import UNET, checkpoints, weighted


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    def run(*args: str) -> Ran:
        code = main(list(args))
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    return run


def test_dry_run_reports_blocks_and_refusals_without_writing(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    a, b = checkpoints(tmp_path, "sd1", 2)
    out = tmp_path / "m.safetensors"
    blocks = "in=0.2,middle_block.1.=1"
    res = cli(
        "merge", str(a), str(b), "--ratio", "0.3", "--blocks", blocks, "-o", str(out), "--dry-run", "--json"
    )
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert [m["family"] for m in report["models"]] == ["sd1", "sd1"] and report["refused"] is None
    blocks_read = {"in": 0.2, "middle_block.1.": 1.0}
    assert report["recipe"] == {
        "method": "weighted",
        "ratio": 0.3,
        "blocks": blocks_read,
        "text_encoders": None,
    }
    assert [b["keys"] > 0 for b in report["blocks"]] == [True, True]
    assert report["output"] == {"path": str(out), "refused": None} and not out.exists()
    three = [str(a), str(b), str(a)]
    bad = cli("merge", *three, "--method", "add-difference", "--blocks", "double_blocks.3.=0", "--dry-run")
    assert (
        bad.returncode == 2
        and "starts with 'double_blocks.3.'" in bad.stderr
        and "Traceback" not in bad.stderr
    )


def test_merge_on_a_simulated_card_then_inspect_reads_the_recipe(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    a, b = checkpoints(tmp_path, "sd1", 2)
    out = tmp_path / "m.safetensors"
    res = cli("merge", str(a), str(b), "--ratio", "0.25", "--vram-limit", "1MiB", "--device", "cpu", "-o",
               str(out), "--json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    done = json.loads(res.stdout)
    assert done["chunk_bytes"] == 1 << 20 and done["slices"] > done["merged"] > 0
    got, A, B = load_file(str(out)), load_file(str(a)), load_file(str(b))
    key = UNET + "input_blocks.1.1.proj_in.weight"
    assert torch.equal(got[key], weighted(A[key], B[key], 0.25).half())
    shown = cli("inspect", str(out))
    assert "merged    weighted 0.25 of A: sd1-a.safetensors [" in shown.stdout, shown.stdout
    record = json.loads(cli("inspect", "--json", str(out)).stdout)[0]["metadata"]["loadout.merge_recipe"]
    assert record["method"] == "weighted" and [i["file"] for i in record["inputs"]] == [a.name, b.name]


def test_a_lora_bake_takes_one_base_and_a_weighted_merge_needs_a_ratio(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    a, b = checkpoints(tmp_path, "sd1", 2, unet_only=True)
    res = cli("merge", str(a), str(b), "--lora", str(b), "-o", str(tmp_path / "x.safetensors"))
    assert res.returncode == 2 and "a LoRA bake takes one base model" in res.stderr
    res = cli("merge", str(a), str(b), "-o", str(tmp_path / "x.safetensors"))
    assert res.returncode == 2 and "needs --ratio" in res.stderr and not (tmp_path / "x.safetensors").exists()
