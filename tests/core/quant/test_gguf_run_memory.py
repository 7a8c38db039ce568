"""`loadout run --json` on a GGUF Q8_0 model streamed on a small card, computing in bf16 (issue 35:
predicted 32.8 MB against 184.6 MB measured). The measured figure counted each layer's decoded
weight as an activation (the decode's output buffer was allocated from nothing, which the tracker
takes for an activation), while the prediction and the plan count it where it is: in the layer's
bytes in flight. Predicted and measured are now the same quantity, within 15 %."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.quant.dequant import CHUNK_ELEMENTS
from core.run.command import RunRequest, run_model
from core.session.testrun import RunConfig
from tests.fixtures import tiny_models as tm
from tests.fixtures.gguf_quant import write_comfy_gguf

#: SD1's UNet at width 384 (one level, one block): its feed-forward layer (3072 x 384) is past one
#: decode chunk, so it decodes into a bf16 buffer as a real model's layers do
WIDE_CONFIG = tm.UNetConfig.per_level(
    model_channels=384, channel_mult=(1,), num_res_blocks=1, level_depth=(1,),
    transformer_depth_middle=1, context_dim=768, num_heads=8, num_head_channels=None,
)  # fmt: skip
WIDE = tm.Tiny("unet-sd1-384", tm.UNET, "sd1", WIDE_CONFIG, seed=1)


@pytest.fixture(scope="module")
def q8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("q8")
    path, _, types = write_comfy_gguf(folder / "sd1-q8.gguf", "sd1", WIDE.file_state(), "Q8_0")
    assert types["middle_block.1.transformer_blocks.0.ff.net.0.proj.weight"] == "Q8_0"
    assert CHUNK_ELEMENTS < 3072 * 384
    return path


def test_streamed_q8_0_predicted_inference_bytes_match_the_measured(q8: Path) -> None:
    config = RunConfig(steps=1, width=64, height=64, seed=3, dtype=torch.bfloat16)
    # a card a little smaller than the model and its activations: the rest streams
    report = run_model(RunRequest(q8, config=config, vram_limit=35 << 20))
    assert report["vram_state"] == "low_vram" and report["streamed_bytes_per_step"] > 0
    assert report["dtype"] == "bfloat16"
    predicted, measured = report["inference_bytes_predicted"], report["inference_bytes_measured"]
    assert abs(measured - predicted) <= 0.15 * predicted, (predicted, measured)
