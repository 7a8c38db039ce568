"""SD3 / SD3.5's measured activation models (``core/archs/mmdit/net.py``, fitted with
``bench/inference_memory.py --fit``, docs/benchmarks.md): each family record names its own, the
numbers a user reads (``loadout run --json``'s prediction, the window's fit estimate) come from it,
and it predicts what the tracker measures of narrower MMDiTs of each form to a few bytes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from app.cli import main
from core.detect.catalog import memory_profile
from core.inspect import inspect_file
from core.library.entry import Entry
from core.memory.fit import estimate_fit
from core.memory.inference import FALLBACK_PROFILE, Workload, activation_bytes, network_profile, predict
from core.memory.tracking import ActivationTracker
from core.models.mmdit import MMDiT, MMDiTConfig
from core.session.testrun import RunConfig, _Inputs
from tests.fixtures.st_files import write_tensors
from tests.fixtures.tiny_models import TINY_MMDIT

pytestmark = pytest.mark.usefixtures("one_thread")

MIB = 1 << 20
#: 128 wide (two 64-wide heads, as the released models' heads), two joint blocks: a full one and
#: the last, whose text stream has no MLP
SD3_NARROW = MMDiTConfig(depth=2, num_heads=2, pos_embed_max_size=16, context_dim=64, adm_in_channels=32)
NARROW = {
    "sd3": SD3_NARROW,
    "sd3.5-medium": replace(SD3_NARROW, qk_norm="rms", dual_attention_layers=(0,)),
    "sd3.5-large": replace(SD3_NARROW, qk_norm="rms"),
}
#: each family's profile (named as its network preset)
PROFILE = {"sd3": "sd3_medium", "sd3.5-medium": "sd35_medium", "sd3.5-large": "sd35_large"}
#: the released models' predictions at 1024 x 1024, batch 1, 2-byte activations (one CUDA step of
#: one picture): (per-token numbers of the width) x width x 2 bytes; the bench measured the same
#: networks at their real widths, fp32, to the byte (docs/benchmarks.md)
AT_1024 = {
    "sd3": 2 * ((16 * 4096 + 6 * 154 + 13) * 1536 + 1),
    "sd3.5-medium": 2 * ((23 * 4096 + 8 * 154 + 16) * 1536 + 1),
    "sd3.5-large": 2 * ((18 * 4096 + 8 * 154 + 13) * 2432 + 1),
}


def _measured_step(model: torch.nn.Module, size: int, batch: int) -> int:
    inputs = _Inputs(model, RunConfig(1, size, size, batch, 0, torch.float32, "cpu"))
    x = inputs.noise.clone()
    roots = [v for v in vars(inputs).values() if isinstance(v, torch.Tensor)] + [x]
    with torch.inference_mode(), ActivationTracker(roots) as tracker:
        inputs.forward(model, x, 0.5)
    return tracker.peak_bytes


def test_each_sd3_family_plans_with_its_own_measured_model_not_the_fallback() -> None:
    full = Workload(1024, 1024, 1, 2, "cuda_flash")
    for family, expected in AT_1024.items():
        assert memory_profile(family) == PROFILE[family]
        assert predict(PROFILE[family], full) == expected, family
        assert activation_bytes(PROFILE[family], full) == expected
    assert AT_1024["sd3"] == 204_205_058  # 195 MiB, where FLUX.2 dev's bound said 1.1 GiB
    assert activation_bytes(None, full) > 5 * AT_1024["sd3"] and FALLBACK_PROFILE == "flux2-dev"
    # below ~200 px the text stream's MLP is the peak: 154 tokens x 16 widths, the picture's 7 each
    small = predict("sd3_medium", Workload(64, 64, 1, 4, "cpu_flash"))
    assert small == 4 * ((16 * 154 + 7 * 16 + 13) * 1536 + 1) == 15_906_820  # the bench's measurement


@pytest.mark.parametrize("family", list(NARROW))
def test_the_sd3_models_predict_a_narrower_mmdit_of_each_form_to_the_byte(family: str) -> None:
    """Scaled to 128 wide, each model against the tracker at 64 px batch 2 (the text MLP's peak)
    and 256 px (the picture MLP's): within 0.01 % (the timestep's one number per sample does not
    scale with the width)."""
    model = MMDiT(NARROW[family]).eval()
    for t in (*model.parameters(), *model.buffers()):
        t.data.zero_()  # the values do not matter to activation memory, only the shapes
    profile, width = network_profile(family, model)
    assert (profile, width) == (PROFILE[family], 128)
    for size, batch in ((64, 2), (256, 1)):
        measured = _measured_step(model, size, batch)
        predicted = activation_bytes(profile, Workload(size, size, batch, 4, "cpu_flash"), width)
        assert predicted == pytest.approx(measured, rel=1e-4), (size, batch, predicted / measured)


@pytest.fixture(scope="module")
def sd3_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 64-wide SD3 diffusion model file (one head, two joint blocks)."""
    return write_tensors(tmp_path_factory.mktemp("sd3mem") / "sd3_tiny.safetensors", TINY_MMDIT.file_state())


def test_loadout_run_predicts_an_sd3_step_with_the_sd3_model(
    sd3_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What ``loadout run --json`` reports: the SD3 model scaled to the file's 64-wide network, 64 px
    fp32 batch 1 (the text MLP's peak), below what the run's tracker saw (it also counts the inputs)."""
    args = ["run", str(sd3_file), "--steps", "1", "--size", "64x64", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["family"] == "sd3"
    expected = int(4 * ((16 * 154 + 7 * 16 + 13) * 1536 + 1) * 64 / 1536)
    assert report["inference_bytes_predicted"] == expected == 662_784
    assert expected < report["inference_bytes_measured"] < 2 * expected


def test_the_window_estimate_keeps_back_the_sd3_model_at_1024(sd3_file: Path) -> None:
    """The fit estimate (the window's, before loading): a GPU keeps back the reserve and one
    1024 x 1024 picture's activations at 2 bytes, SD3's own figure."""
    stat = sd3_file.stat()
    entry = Entry(sd3_file, "test", sd3_file.parent, "", None, stat.st_size, stat.st_mtime_ns)
    entry = entry.with_record(inspect_file(sd3_file).to_json(), None)
    assert entry.status == "ok" and entry.family == "sd3"
    free, reserve = 2048 * MIB, 400 * MIB
    est = estimate_fit(entry, free, where="GPU", on_gpu=True, ram_available=8 << 30, reserve=reserve)
    assert est.verdict == "fits" and est.usable == free - reserve - AT_1024["sd3"]
