"""`inspect` end to end: real-layout files on disk -> the JSON contract of DESIGN.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.inspect import inspect_file
from tests.fixtures import layouts_diffusion as ld
from tests.fixtures.diffusion_layouts_components import kl_vae
from tests.fixtures.layouts_encoders import clip_l_hf, t5_xxl
from tests.fixtures.layouts_lora import lora_layout, unet_attention_layers
from tests.fixtures.st_files import write_sparse

ROOT = Path(__file__).resolve().parents[2]
CONTRACT_KEYS = [
    "path", "kind", "family", "variant", "format", "layout", "components", "lora", "metadata", "warnings",
    "error",
]  # fmt: skip
COMPONENT_KEYS = {"role", "family", "prefix", "tensors", "params", "bytes", "dtype"}


def _roles(rec: dict) -> dict[str, str]:
    return {c["prefix"]: f"{c['role']}:{c['family']}" for c in rec["components"]}


@pytest.mark.parametrize(
    ("layout", "family", "roles"),
    [
        (
            ld.sd1_checkpoint,
            "sd1",
            {
                "model.diffusion_model.": "diffusion_model:sd1",
                "first_stage_model.": "vae:vae-sd",
                "cond_stage_model.transformer.": "text_encoder:clip-l",
            },
        ),
        (
            ld.sd2_checkpoint,
            "sd2",
            {
                "model.diffusion_model.": "diffusion_model:sd2",
                "first_stage_model.": "vae:vae-sd",
                "cond_stage_model.model.": "text_encoder:clip-h",
            },
        ),
        (
            ld.sdxl_checkpoint,
            "sdxl",
            {
                "model.diffusion_model.": "diffusion_model:sdxl",
                "first_stage_model.": "vae:vae-sd",
                "conditioner.embedders.0.transformer.": "text_encoder:clip-l",
                "conditioner.embedders.1.model.": "text_encoder:clip-g",
            },
        ),
        (
            ld.sdxl_refiner_checkpoint,
            "sdxl-refiner",
            {
                "model.diffusion_model.": "diffusion_model:sdxl-refiner",
                "first_stage_model.": "vae:vae-sd",
                "conditioner.embedders.0.model.": "text_encoder:clip-g",
            },
        ),
        (
            ld.sd3_checkpoint,
            "sd3",
            {
                "model.diffusion_model.": "diffusion_model:sd3",
                "first_stage_model.": "vae:vae-sd3",
                "text_encoders.clip_l.transformer.": "text_encoder:clip-l",
                "text_encoders.clip_g.transformer.": "text_encoder:clip-g",
                "text_encoders.t5xxl.transformer.": "text_encoder:t5-xxl",
            },
        ),
        (
            ld.flux_checkpoint,
            "flux-dev",
            {
                "model.diffusion_model.": "diffusion_model:flux-dev",
                "vae.": "vae:vae-flux",
                "text_encoders.clip_l.transformer.": "text_encoder:clip-l",
                "text_encoders.t5xxl.transformer.": "text_encoder:t5-xxl",
            },
        ),
    ],
)
def test_all_in_one_checkpoints(tmp_path: Path, layout, family: str, roles: dict[str, str]) -> None:
    p = write_sparse(tmp_path / f"{family}.safetensors", layout())
    rec = inspect_file(p).to_json()
    assert list(rec) == CONTRACT_KEYS
    assert rec["kind"] == "checkpoint" and rec["family"] == family and rec["error"] is None
    found = _roles(rec)
    for prefix, role in roles.items():
        assert found.get(prefix) == role, (prefix, found)
    for c in rec["components"]:
        assert set(c) == COMPONENT_KEYS and c["params"] > 0 and c["bytes"] >= c["params"]
        assert c["dtype"] == "fp16"


def test_sdxl_checkpoint_component_sizes_are_true_sizes(tmp_path: Path) -> None:
    p = write_sparse(tmp_path / "sdxl.safetensors", ld.sdxl_checkpoint())
    rec = inspect_file(p).to_json()
    unet = next(c for c in rec["components"] if c["role"] == "diffusion_model")
    assert unet["tensors"] == 1680 and unet["params"] == 2_567_463_684
    assert unet["bytes"] == 2 * unet["params"]


def test_standalone_components(tmp_path: Path) -> None:
    unet = write_sparse(tmp_path / "unet.safetensors", ld.unet("sdxl"))
    vae = write_sparse(tmp_path / "ae.safetensors", kl_vae(z=16, quant_conv=False))
    te = write_sparse(tmp_path / "clip_l.safetensors", clip_l_hf())
    t5 = write_sparse(tmp_path / "t5xxl_fp16.safetensors", t5_xxl())
    r = inspect_file(unet).to_json()
    assert (r["kind"], r["family"]) == ("diffusion_model", "sdxl")
    assert r["components"][0]["prefix"] == "" and r["components"][0]["tensors"] == 1680
    r = inspect_file(vae).to_json()
    assert (r["kind"], r["family"]) == ("vae", "vae-flux")
    assert (inspect_file(te).to_json()["family"], inspect_file(t5).to_json()["family"]) == (
        "clip-l",
        "t5-xxl",
    )


def test_vae_hint_from_file_name_is_marked_as_a_hint(tmp_path: Path) -> None:
    p = write_sparse(tmp_path / "sdxl_vae.safetensors", kl_vae())
    rec = inspect_file(p).to_json()
    assert rec["kind"] == "vae" and rec["family"] == "vae-sd" and rec["variant"] == "sdxl"
    assert any("hint" in w for w in rec["warnings"])
    plain = inspect_file(write_sparse(tmp_path / "vae.safetensors", kl_vae())).to_json()
    assert plain["variant"] is None and any("cannot tell" in w for w in plain["warnings"])


def test_lora_record(tmp_path: Path) -> None:
    layout = lora_layout(unet_attention_layers("sdxl", naming="original"), "kohya", rank=16)
    meta = {"ss_tag_frequency": json.dumps({"10_ohwx": {"ohwx person": 10, "smiling": 3}})}
    p = write_sparse(tmp_path / "my_lora.safetensors", layout, metadata=meta)
    (tmp_path / "my_lora.preview.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    rec = inspect_file(p).to_json()
    assert rec["kind"] == "lora" and rec["family"] == "sdxl"
    assert rec["lora"]["format"] == "kohya" and rec["lora"]["rank"] == 16
    assert rec["lora"]["targets"]["diffusion_model"] > 0
    assert rec["metadata"]["loadout.trigger_words"][0] == "ohwx person"
    assert rec["metadata"]["loadout.preview"].endswith("my_lora.preview.png")
    assert rec["metadata"]["ss_tag_frequency"] == meta["ss_tag_frequency"]


def test_unknown_but_valid_file_is_not_an_error(tmp_path: Path) -> None:
    p = write_sparse(tmp_path / "mystery.safetensors", {"foo.bar.weight": (3, 3), "foo.baz": (2,)})
    rec = inspect_file(p).to_json()
    assert rec["kind"] == "unknown" and rec["error"] is None
    assert any("foo" in w for w in rec["warnings"])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_cli_json_walks_folders_and_reports_errors_with_exit_1(tmp_path: Path) -> None:
    lib = tmp_path / "models"
    write_sparse(lib / "checkpoints" / "sd15.safetensors", ld.sd1_checkpoint())
    (lib / "loras").mkdir()
    (lib / "loras" / "broken.safetensors").write_bytes(b"\x00" * 5)
    (lib / "loras" / "notes.txt").write_text("not a model")
    missing = tmp_path / "nope.safetensors"
    res = _cli("inspect", "--json", str(lib), str(missing))
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    records = json.loads(res.stdout)
    assert [Path(r["path"]).name for r in records] == [
        "sd15.safetensors",
        "broken.safetensors",
        "nope.safetensors",
    ]
    assert records[0]["error"] is None and records[0]["family"] == "sd1"
    assert records[1]["error"]["code"] == "truncated"
    assert records[2]["error"]["code"] == "not_found"
    for r in records:
        assert list(r) == CONTRACT_KEYS


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The command in this process (the subprocess above proves the process's own contract once)."""
    from app.cli import main

    code = main(list(args))
    return code, capsys.readouterr().out


def test_cli_table_and_success_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write_sparse(tmp_path / "flux.safetensors", ld.flux_checkpoint())
    code, out = _main(capsys, "inspect", str(p))
    assert code == 0
    assert "flux-dev" in out and "diffusion_model" in out and "t5-xxl" in out


def test_cli_empty_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _main(capsys, "inspect", "--json", str(tmp_path))
    assert code == 1
    assert json.loads(out)[0]["error"]["code"] == "is_directory"
