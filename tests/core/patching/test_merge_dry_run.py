"""`loadout merge --dry-run` reports what `merge` would refuse (issue 35): each refusal of the real
merge (a damaged base, a LoRA for another family, NaN factors, an output that names a folder) is
found by the dry run with the same code and words, without writing anything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.errors import LoadoutError
from core.loading.loader import load_checkpoint
from core.patching.merge import LoraArg, dry_run, merge, refused
from tests.fixtures.st_files import write_tensors
from tests.fixtures.tiny_models import checkpoint_tensors

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("dry")
    torch.manual_seed(0)
    tensors = checkpoint_tensors("sd1")
    base = write_tensors(d / "base.safetensors", tensors)
    # the base with one UNet norm gone: detected as SD1, refused when planned for loading
    damaged = {k: v for k, v in tensors.items() if not k.endswith("middle_block.1.norm.bias")}
    g = torch.Generator().manual_seed(5)
    lora = {}
    for k, v in load_checkpoint(base).diffusion_model.module.state_dict().items():
        if k.endswith("attn2.to_k.weight"):
            name = "lora_unet_" + k[: -len(".weight")].replace(".", "_")
            lora[f"{name}.lora_down.weight"] = torch.randn(2, v.shape[1], generator=g)
            lora[f"{name}.lora_up.weight"] = torch.randn(v.shape[0], 2, generator=g)
    nan = {k: v.clone() for k, v in lora.items()}
    nan[next(k for k in nan if k.endswith("lora_up.weight"))][3, 1] = float("nan")
    xl = {  # an SDXL-shaped LoRA (cross-attention from 2048-wide text, a second text encoder)
        "lora_unet_input_blocks_4_1_transformer_blocks_0_attn2_to_k.lora_down.weight": torch.zeros(4, 2048),
        "lora_unet_input_blocks_4_1_transformer_blocks_0_attn2_to_k.lora_up.weight": torch.zeros(640, 4),
        "lora_te2_text_model_encoder_layers_0_self_attn_q_proj.lora_down.weight": torch.zeros(4, 1280),
        "lora_te2_text_model_encoder_layers_0_self_attn_q_proj.lora_up.weight": torch.zeros(1280, 4),
    }
    return {
        "base": base,
        "damaged": write_tensors(d / "damaged.safetensors", damaged),
        "good": write_tensors(d / "good.safetensors", lora),
        "nan": write_tensors(d / "nan.safetensors", nan),
        "xl": write_tensors(d / "xl_style.safetensors", xl),
    }


CASES = {  # base, lora, output (None: a new file): one refusal of the merge each
    "damaged base": ("damaged", "good", None),
    "nan factor": ("base", "nan", None),
    "other family": ("base", "xl", None),
    "output is a folder": ("base", "good", "folder/"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_dry_run_finds_what_the_merge_refuses(files: dict[str, Path], case: str, tmp_path: Path) -> None:
    base, lora, out = CASES[case]
    target = str(tmp_path / (out or "merged.safetensors"))
    if out and out.endswith("/"):
        (tmp_path / out).mkdir()
    with pytest.raises(LoadoutError) as err:
        merge(files[base], [LoraArg(files[lora])], target)
    before = sorted(tmp_path.iterdir())
    report = dry_run(files[base], [LoraArg(files[lora])], out=target)
    assert refused(report) == [err.value.to_json()]  # the same refusal, in the same words
    assert sorted(tmp_path.iterdir()) == before  # nothing written


def test_dry_run_of_a_merge_that_succeeds_refuses_nothing(files: dict[str, Path], tmp_path: Path) -> None:
    report = dry_run(files["base"], [LoraArg(files["good"])], out=tmp_path / "m.safetensors")
    assert refused(report) == [] and report["loras"][0]["matched"] == report["loras"][0]["modules"] > 0
    forced = dry_run(files["base"], [LoraArg(files["xl"])], force=True)
    assert refused(forced) == []  # forced, the other family's LoRA is applied where it fits
    merge(files["base"], [LoraArg(files["xl"])], tmp_path / "forced.safetensors", force=True)


def test_cli_dry_run_names_each_refusal_and_exits_as_the_merge_would(files: dict[str, Path]) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "app.cli", "merge", str(files["base"]), "--lora", str(files["nan"]),
         "--lora", str(files["xl"]), "--dry-run", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    report = json.loads(res.stdout)
    assert [lo["refused"]["code"] for lo in report["loras"]] == ["nonfinite_adapter", "lora_family_mismatch"]
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("loadout: the merge would be refused:")]
    assert len(lines) == 2 and "nan.safetensors" in lines[0] and "NaN" in lines[0]
    assert "xl_style.safetensors" in lines[1] and "--force" in lines[1] and "Traceback" not in res.stderr
