"""What a merge refuses (in words, naming the first key that differs), what it leaves behind when
stopped (nothing: no output, no partial file), and the same merge on a simulated small card: the
manager evicts what it holds to make room, the tensors are split to fit, and the file is the same
bytes as the merge computed whole on the CPU."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from core.errors import FileAccessError, FileFormatError, InterruptedByUser, LoadoutError, ModelMismatchError
from core.memory.policy import MemorySettings, VramState
from core.merging.merge import merge_models, plan_merge
from core.merging.recipe import MergeMethod, MergeRecipe
from core.session.placement import Placement, PlacementConfig
from tests.core.merging.util import checkpoints, varied
from tests.fixtures.fp8_scaled import write_scaled_fp8
from tests.fixtures.gguf_files import write_gguf
from tests.fixtures.st_files import write_tensors
from tests.fixtures.tiny_models import TINY_UNET_SD1, TINY_UNET_SDXL

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[3]
W = MergeRecipe(MergeMethod.WEIGHTED, 0.5)


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture()
def sd1(tmp_path: Path) -> list[Path]:
    return checkpoints(tmp_path, "sd1", 3, unet_only=True)


def test_another_family_is_refused_by_name(tmp_path: Path, sd1: list[Path]) -> None:
    xl = write_tensors(tmp_path / "xl.safetensors", TINY_UNET_SDXL.file_state())
    with pytest.raises(
        ModelMismatchError, match=r"Stable Diffusion 1\.x and model B is Stable Diffusion XL"
    ) as e:
        plan_merge([sd1[0], xl], W)
    assert e.value.code == "wrong_model"


def test_a_missing_key_and_a_shape_are_refused_naming_the_first(tmp_path: Path, sd1: list[Path]) -> None:
    state = dict(TINY_UNET_SD1.file_state())
    del state["output_blocks.1.0.skip_connection.weight"], state["out.2.bias"]
    short = write_tensors(tmp_path / "short.safetensors", state)
    with pytest.raises(ModelMismatchError, match=r"sd1-a.safetensors has 'out.2.bias' and short") as e:
        plan_merge([sd1[0], short], W)
    assert e.value.code == "layout_mismatch"
    state = dict(TINY_UNET_SD1.file_state())
    state["time_embed.2.bias"] = torch.zeros(7)
    odd = write_tensors(tmp_path / "odd.safetensors", state)
    with pytest.raises(
        ModelMismatchError, match=r"'time_embed.2.bias' is \[128\] in model A and \[7\] in model B"
    ):
        plan_merge([sd1[0], odd], W)


def test_files_that_are_not_plain_models_are_refused(tmp_path: Path, sd1: list[Path]) -> None:
    lora = write_tensors(
        tmp_path / "l.safetensors",
        {
            "lora_unet_out_2.lora_down.weight": torch.zeros(2, 32),
            "lora_unet_out_2.lora_up.weight": torch.zeros(4, 2),
        },
    )
    with pytest.raises(ModelMismatchError, match=r"model B, l\.safetensors, is a LoRA") as e:
        plan_merge([sd1[0], lora], W)
    assert e.value.code == "wrong_kind"
    gguf = write_gguf(
        tmp_path / "q.gguf", {"out.2.weight": ("Q8_0", (4, 32))}, {"general.architecture": "sd1"}
    )
    with pytest.raises(FileFormatError, match="quantized GGUF file") as f:
        plan_merge([gguf, sd1[0]], W)
    assert f.value.code == "quantized_source"
    fp8 = tmp_path / "unet_fp8_scaled.safetensors"
    write_scaled_fp8(fp8, TINY_UNET_SD1.file_state(), style="comfy_quant")
    bad = r"model B, unet_fp8_scaled\.safetensors, holds scaled fp8"
    with pytest.raises(FileFormatError, match=bad) as g:
        plan_merge([sd1[0], fp8], W)
    assert g.value.code == "quantized_source"


def test_counts_ratios_blocks_and_text_encoders_are_checked(sd1: list[Path]) -> None:
    with pytest.raises(LoadoutError, match="add-difference merges 3 models, and 2 were given"):
        plan_merge(sd1[:2], MergeRecipe(MergeMethod.ADD_DIFFERENCE, 1.0))
    with pytest.raises(LoadoutError, match=r"merge ratio 1\.5 is out of range"):
        MergeRecipe(MergeMethod.WEIGHTED, 1.5)
    with pytest.raises(LoadoutError, match="merge multiplier -11 is out of range"):
        MergeRecipe(MergeMethod.SUBTRACT, -11.0)
    with pytest.raises(
        LoadoutError, match=r"starts with 'input_blocks.12.'.*ModelMergeSD1: time_embed\."
    ) as e:
        plan_merge(sd1[:2], MergeRecipe(MergeMethod.WEIGHTED, 0.5, (("input_blocks.12.", 0.1),)))
    assert e.value.code == "bad_argument"
    with pytest.raises(LoadoutError, match="has no text encoders to merge"):
        plan_merge(sd1[:2], MergeRecipe(MergeMethod.WEIGHTED, 0.5, text_encoders=0.5))


def test_the_output_is_never_an_input(sd1: list[Path]) -> None:
    before = _sha(sd1[1])
    with pytest.raises(FileAccessError, match="is the input file"):
        merge_models(sd1[:2], W, sd1[1])
    assert _sha(sd1[1]) == before


def test_a_merge_stopped_mid_write_leaves_no_file(tmp_path: Path, sd1: list[Path]) -> None:
    calls = 0

    def check() -> None:
        nonlocal calls
        calls += 1
        if calls == 40:
            raise InterruptedByUser("stopped")

    out = tmp_path / "out" / "m.safetensors"
    with pytest.raises(InterruptedByUser):
        merge_models(sd1[:2], W, out, check=check)
    assert calls == 40 and sorted(os.listdir(out.parent)) == []  # no output, no partial


def test_a_merge_killed_mid_write_leaves_no_output(tmp_path: Path, sd1: list[Path]) -> None:
    """SIGKILL while the 30th tensor is written: only the writer's locked partial is left (swept by
    the next write to that folder); the output name never appears."""
    out = tmp_path / "killed.safetensors"
    code = (
        "import os, signal, sys\n"
        "from core.merging.merge import merge_models\n"
        "from core.merging.recipe import MergeMethod, MergeRecipe\n"
        "n = [0]\n"
        "def check():\n"
        "    n[0] += 1\n"
        "    if n[0] == 30: os.kill(os.getpid(), signal.SIGKILL)\n"
        "merge_models(sys.argv[1:3], MergeRecipe(MergeMethod.WEIGHTED, 0.5), sys.argv[3], check=check)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code, *map(str, sd1[:2]), str(out)], env=env, timeout=120)
    assert res.returncode == -signal.SIGKILL
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")]  # it was mid-write


def test_on_a_small_simulated_card_the_manager_makes_room_and_the_file_is_the_same(
    tmp_path: Path, sd1: list[Path]
) -> None:
    a, b, c = sd1
    b16 = write_tensors(
        tmp_path / "b-bf16.safetensors", varied(TINY_UNET_SD1.file_state(), 5, torch.bfloat16)
    )
    for paths, recipe in (
        ([a, b16], MergeRecipe(MergeMethod.WEIGHTED, 0.3, (("middle_block.", 0.9),))),
        ([a, b, c], MergeRecipe(MergeMethod.ADD_DIFFERENCE, 0.6)),
    ):
        whole = merge_models(paths, recipe, tmp_path / f"whole-{len(paths)}.safetensors")
        assert whole.slices == whole.merged  # on the CPU every tensor is one slice
        settings = MemorySettings(vram_state=VramState.NORMAL_VRAM)
        placement = Placement(None, PlacementConfig(settings, simulate_bytes=256 << 10, inference_bytes=0))
        held = nn.Sequential(nn.Linear(64, 128), nn.Linear(128, 64))  # a model the card holds
        placement.register(held, "held")
        placement.manager.load_models([held], 0).raise_if_refused()
        assert placement.placed_bytes() > 0
        card = merge_models(
            paths, recipe, tmp_path / f"card-{len(paths)}.safetensors", manager=placement.manager
        )
        assert card.device == "cpu" and card.chunk_bytes == 256 << 10
        assert card.slices > card.merged  # the larger tensors were split to fit the card
        assert placement.placed_bytes() == 0  # evicted to make room, as for any load
        assert [e.kind for e in placement.events.events()][-1] == "unload"
        assert _sha(card.path) == _sha(whole.path)
