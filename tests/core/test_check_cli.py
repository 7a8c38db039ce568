"""`loadout check`: the DESIGN.md contract, from headers only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.loading.check import check_file
from tests.fixtures import layouts_diffusion as ld
from tests.fixtures.layouts_lora import lora_layout, unet_attention_layers
from tests.fixtures.st_files import write_sparse

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_full_size_sdxl_checkpoint_checks_clean(tmp_path: Path) -> None:
    p = write_sparse(tmp_path / "sdxl.safetensors", ld.sdxl_checkpoint())
    res = _cli("check", "--json", str(p))
    assert res.returncode == 0, res.stderr
    rec = json.loads(res.stdout)
    assert set(rec) >= {"path", "family", "ok", "components"}
    assert rec["ok"] is True and rec["family"] == "sdxl"
    assert [c["role"] for c in rec["components"]] == [
        "diffusion_model",
        "vae",
        "text_encoder",
        "text_encoder",
    ]
    for c in rec["components"]:
        assert c["missing"] == c["unexpected"] == c["shape_mismatches"] == []


def test_hand_edited_header_is_reported_key_by_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli import main  # in this process: the test above proves the process's contract

    layout = dict(ld.sd1_checkpoint())
    key = "model.diffusion_model.input_blocks.1.1.proj_in.weight"
    layout[key] = (320, 321, 1, 1)
    del layout["first_stage_model.decoder.conv_out.bias"]
    layout["model.diffusion_model.extra.weight"] = (3,)
    p = write_sparse(tmp_path / "edited.safetensors", layout)
    rec = check_file(p)
    assert rec["ok"] is False
    unet = next(c for c in rec["components"] if c["role"] == "diffusion_model")
    vae = next(c for c in rec["components"] if c["role"] == "vae")
    assert any(
        "input_blocks.1.1.proj_in.weight" in m and "(320, 321, 1, 1)" in m for m in unet["shape_mismatches"]
    )
    assert "extra.weight" in unet["unexpected"]
    assert vae["missing"] == ["decoder.conv_out.bias"]
    assert main(["check", str(p)]) == 1
    out, err = capsys.readouterr()
    assert "NOT OK" in out and "Traceback" not in err


def test_lora_and_missing_files_get_clear_errors(tmp_path: Path) -> None:
    lora = write_sparse(
        tmp_path / "l.safetensors", lora_layout(unet_attention_layers("sd1"), "kohya", rank=4)
    )
    rec = check_file(lora)
    assert rec["ok"] is False and rec["error"]["code"] == "nothing_to_check"
    assert "inspect" in rec["error"]["message"]
    rec = check_file(tmp_path / "missing.safetensors")
    assert rec["error"]["code"] == "not_found"


def test_unloadable_family_is_named(tmp_path: Path) -> None:
    p = write_sparse(tmp_path / "wan.safetensors", ld.DIFFUSION_LAYOUTS["wan2.1"]())
    rec = check_file(p)
    assert rec["ok"] is False
    err = rec["components"][0]["error"]
    assert err["code"] == "unsupported_family" and "sdxl" in err["message"]
