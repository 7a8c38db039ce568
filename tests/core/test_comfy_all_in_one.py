"""ComfyUI-saved all-in-one files (Flux-dev fp8, SD3 medium with CLIPs and with T5, SD3.5): each
component once, with its prefix, tensor count and bytes, the same in ``inspect``, ``check`` and loading.

Full-size files are sparse safetensors written in the exact Comfy-Org layout (Flux-dev fp8's header
facts: 1,442 tensors and its bytes per dtype); loading runs on tiny real-data files of the same layout
(``tests.fixtures.tiny_models``). Each text encoder sits under ``text_encoders.<name>.transformer.``
with its wrapper's ``text_encoders.<name>.logit_scale`` beside it, which belongs to no component.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from app.cli import main as cli_main
from core.inspect import inspect_file
from core.loading.check import check_file
from core.loading.loader import load_checkpoint
from tests.fixtures import layouts_diffusion as L
from tests.fixtures.st_files import BITS, write_sparse, write_tensors
from tests.fixtures.tiny_models import COMFY_LOGIT_SCALE, checkpoint_tensors

DIFF, VAE, TE = "diffusion_model", "vae", "text_encoder"


def _bytes(layout: L.TypedLayout) -> int:
    total = 0
    for spec in layout.values():
        dt, shape = spec if isinstance(spec[0], str) else ("F16", spec)  # type: ignore[misc]
        total += math.prod(shape) * BITS[dt] // 8  # type: ignore[arg-type]
    return total


def _under(layout: L.TypedLayout, prefix: str) -> L.TypedLayout:
    return {k: v for k, v in layout.items() if k.startswith(prefix)}


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    capsys.readouterr()
    code = cli_main(list(argv))
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def test_flux_dev_fp8_all_in_one_lists_each_component_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = L.flux_dev_fp8_comfy()
    header = L.FLUX_DEV_FP8_HEADER
    assert len(layout) == header["tensors"]
    assert _bytes(layout) == header["F8_E4M3"] + header["F16"] + header["F32"]
    path = write_sparse(tmp_path / "flux1-dev-fp8.safetensors", layout)

    rec = inspect_file(path).to_json()
    assert (rec["kind"], rec["family"]) == ("checkpoint", "flux-dev")
    want = [
        (DIFF, "flux-dev", "model.diffusion_model.", 780, "fp8_e4m3fn"),
        (VAE, "vae-flux", "vae.", 244, "fp32"),
        (TE, "clip-l", "text_encoders.clip_l.transformer.", 197, "fp16"),
        (TE, "t5-xxl", "text_encoders.t5xxl.transformer.", 219, "fp8_e4m3fn"),
    ]
    got = [(c["role"], c["family"], c["prefix"], c["tensors"], c["dtype"]) for c in rec["components"]]
    assert got == want
    for comp in rec["components"]:
        assert comp["bytes"] == _bytes(_under(layout, comp["prefix"])), comp["prefix"]
    # the components plus the two fp32 logit_scale scalars are the whole file
    assert sum(c["tensors"] for c in rec["components"]) + 2 == header["tensors"]
    assert sum(c["bytes"] for c in rec["components"]) + 2 * 4 == _bytes(layout)
    assert rec["components"][2]["bytes"] == header["F16"]  # CLIP-L is the file's only fp16 part

    cli = _cli_json(capsys, "inspect", "--json", str(path))
    assert isinstance(cli, list) and cli[0]["components"] == rec["components"]

    check = check_file(path)
    assert check["ok"], check
    assert [(c["role"], c["family"], c["prefix"]) for c in check["components"]] == [w[:3] for w in want]
    assert all(not (c["missing"] or c["unexpected"] or c["shape_mismatches"]) for c in check["components"])
    assert _cli_json(capsys, "check", "--json", str(path)) == json.loads(json.dumps(check))


SD3_FILES = {
    "sd3_medium_incl_clips": ("sd3", False),
    "sd3_medium_incl_clips_t5xxlfp8": ("sd3", True),
    "sd3.5_medium_incl_clips_t5": ("sd3.5-medium", True),
    "sd3.5_large_incl_clips_t5": ("sd3.5-large", True),
}


@pytest.mark.parametrize("name", list(SD3_FILES))
def test_sd3_all_in_one_lists_each_component_once(tmp_path: Path, name: str) -> None:
    kind, t5 = SD3_FILES[name]
    layout = L.sd3_checkpoint(kind, t5=t5)
    path = write_sparse(tmp_path / f"{name}.safetensors", layout)
    rec = inspect_file(path).to_json()
    want = [
        (DIFF, kind, "model.diffusion_model."),
        (VAE, "vae-sd3", "first_stage_model."),
        (TE, "clip-l", "text_encoders.clip_l.transformer."),
        (TE, "clip-g", "text_encoders.clip_g.transformer."),
    ] + ([(TE, "t5-xxl", "text_encoders.t5xxl.transformer.")] if t5 else [])
    assert [(c["role"], c["family"], c["prefix"]) for c in rec["components"]] == want
    for comp in rec["components"]:
        part = _under(layout, comp["prefix"])  # type: ignore[arg-type]
        assert (comp["tensors"], comp["bytes"]) == (len(part), _bytes(part)), comp["prefix"]
    scalars = [k for k in layout if k.endswith(".logit_scale")]
    assert len(scalars) == len(want) - 2
    assert sum(c["tensors"] for c in rec["components"]) + len(scalars) == len(layout)

    check = check_file(path)
    assert check["ok"], check
    assert [(c["role"], c["family"], c["prefix"]) for c in check["components"]] == want


def test_sd3_incl_clips_without_t5_loads_each_component_once(tmp_path: Path) -> None:
    tensors = {k: v for k, v in checkpoint_tensors("sd3").items() if not k.startswith("text_encoders.t5xxl.")}
    path = write_tensors(tmp_path / "sd3_medium_incl_clips.safetensors", tensors)
    bundle = load_checkpoint(path)
    assert [(c.role, c.family, c.prefix) for c in bundle.components] == [
        (DIFF, "sd3", "model.diffusion_model."),
        (TE, "clip-l", "text_encoders.clip_l.transformer."),
        (TE, "clip-g", "text_encoders.clip_g.transformer."),
        (VAE, "vae-sd3", "first_stage_model."),
    ]
    assert sorted(bundle.extras) == ["text_encoders.clip_g.logit_scale", "text_encoders.clip_l.logit_scale"]
    scale = bundle.extras["text_encoders.clip_l.logit_scale"]()
    assert scale.dtype == torch.float32 and scale.item() == pytest.approx(COMFY_LOGIT_SCALE)
    # inspect, check and the loader agree on the split
    rec = inspect_file(path).to_json()
    assert sorted(c["prefix"] for c in rec["components"]) == sorted(c.prefix for c in bundle.components)
    assert check_file(path)["ok"]
