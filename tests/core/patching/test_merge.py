"""`loadout merge`: headers-only dry run, and a real bake into a copy in the base's layout."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from core.errors import FileAccessError
from core.loading.loader import load_checkpoint
from core.patching.lora_stack import LoraStack
from core.patching.merge import LoraArg, merge
from tests.fixtures import layouts_diffusion as ld
from tests.fixtures.layouts_lora import lora_layout, unet_attention_layers
from tests.fixtures.st_files import write_sparse, write_tensors
from tests.fixtures.tiny_models import checkpoint_tensors

ROOT = Path(__file__).resolve().parents[3]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_dry_run_on_full_size_sdxl_matches_diffusers_peft_lora_completely(tmp_path: Path) -> None:
    """The diffusers/PEFT SDXL naming, of which ComfyUI matches only the text-encoder part."""
    base = write_sparse(tmp_path / "sdxl.safetensors", ld.sdxl_checkpoint())
    layers = unet_attention_layers("sdxl", naming="diffusers")
    lora = write_sparse(tmp_path / "xl_peft.safetensors", lora_layout(layers, "peft", rank=8))
    stamp = [(p.stat().st_size, p.stat().st_mtime_ns) for p in (base, lora)]  # a 7 GB sparse file: no hash
    res = _cli("merge", str(base), "--lora", f"{lora}:0.8", "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["base"] == {"path": str(base), "family": "sdxl", "refused": None}
    (entry,) = report["loras"]
    assert set(entry) == {
        "path",
        "format",
        "base_family",
        "modules",
        "matched",
        "unmatched",
        "shape_mismatches",
        "skipped",
        "refused",
    }
    assert entry["base_family"] == "sdxl" and entry["matched"] == entry["modules"] == len(layers)
    assert entry["unmatched"] == [] and entry["shape_mismatches"] == []
    assert entry["skipped"] == [] and entry["refused"] is None
    assert [(p.stat().st_size, p.stat().st_mtime_ns) for p in (base, lora)] == stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sdxl.safetensors", "xl_peft.safetensors"]


@pytest.fixture()
def tiny(tmp_path: Path) -> tuple[Path, Path]:
    torch.manual_seed(0)
    base = write_tensors(tmp_path / "tiny-sd15.safetensors", checkpoint_tensors("sd1"))
    bundle = load_checkpoint(base)
    g = torch.Generator().manual_seed(5)
    tensors = {}
    for k, v in bundle.diffusion_model.module.state_dict().items():
        if k.endswith("attn2.to_k.weight"):
            name = "lora_unet_" + k[: -len(".weight")].replace(".", "_")
            tensors[f"{name}.lora_down.weight"] = torch.randn(2, v.shape[1], generator=g)
            tensors[f"{name}.lora_up.weight"] = torch.randn(v.shape[0], 2, generator=g)
    return base, write_tensors(tmp_path / "tiny_lora.safetensors", tensors)


def test_merge_bakes_the_stack_in_the_base_layout(tiny: tuple[Path, Path], tmp_path: Path) -> None:
    base, lora = tiny
    before = (_sha(base), _sha(lora))
    out = merge(base, [LoraArg(lora, 0.6)], tmp_path / "merged.safetensors", dtype=torch.float16)
    assert (_sha(base), _sha(lora)) == before
    merged, original = load_file(str(out)), load_file(str(base))
    assert set(merged) == set(original)  # same key layout, extras (scheduler buffers) included
    # the reference: the same stack applied in memory
    bundle = load_checkpoint(base)
    stack = LoraStack(bundle.components)
    stack.add(lora, 0.6)
    stack.apply()
    unet = bundle.diffusion_model.module.state_dict()
    changed = 0
    for k, v in unet.items():
        got = merged["model.diffusion_model." + k]
        assert got.dtype == torch.float16 and torch.equal(got, v.half()), k
        changed += int(not torch.equal(got, original["model.diffusion_model." + k].half()))
    assert changed == sum(1 for k in unet if k.endswith("attn2.to_k.weight"))
    record = json.loads(__import__("safetensors").safe_open(str(out), "pt").metadata()["loadout.merged"])
    assert record[0]["file"] == "tiny_lora.safetensors" and record[0]["model_strength"] == 0.6


def test_merge_refuses_overwriting_an_input(
    tiny: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli import main  # in this process: the dry run above proves the process's contract

    base, lora = tiny
    for out in (base, lora):
        with pytest.raises(FileAccessError):
            merge(base, [LoraArg(lora)], out)
    assert main(["merge", str(base), "--lora", str(lora), "-o", str(lora)]) == 2
    err = capsys.readouterr().err
    assert "input" in err and "Traceback" not in err
