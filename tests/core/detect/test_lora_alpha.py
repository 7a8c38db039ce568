"""A LoRA's trained scale when its alpha lives only in the metadata (diffusers/PEFT trainers): read
from files written by diffusers' own writer, reported per component, never when ``.alpha`` tensors
exist, never an error for broken metadata (ComfyUI #12191; applied at 1 as ComfyUI does)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from app.commands.inspect_cmd import format_table
from core.detect.keyview import KeyView
from core.detect.lora import analyze_lora
from core.detect.lora_alpha import trained_scales
from core.detect.types import TrainedScale
from core.files.safetensors import read_header
from core.inspect import inspect_file

pytest.importorskip("diffusers")
pytest.importorskip("peft")
from tests.fixtures.peft_alpha import model_lora, pipeline_lora


def _metadata(path: Path) -> dict[str, str]:
    with safe_open(str(path), "pt") as f:
        return dict(f.metadata() or {})


def _rewrite(path: Path, out: Path, metadata: dict[str, str], alpha: float | None = None) -> Path:
    """``path``'s tensors under other metadata; ``alpha`` adds a ``.alpha`` tensor per module."""
    import torch

    tensors = load_file(str(path))
    if alpha is not None:
        for key in [k for k in tensors if k.endswith(".lora_A.weight")]:
            tensors[key.removesuffix(".lora_A.weight") + ".alpha"] = torch.tensor(alpha)
    save_file(tensors, str(out), metadata=metadata)
    return out


@pytest.fixture(scope="module")
def diffusers_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pipeline_lora(tmp_path_factory.mktemp("pipeline"))


def test_the_diffusers_writer_keeps_alpha_in_metadata_only(diffusers_file: Path) -> None:
    meta = _metadata(diffusers_file)
    config = json.loads(meta["lora_adapter_metadata"])
    assert (config["unet.r"], config["unet.lora_alpha"]) == (4, 16)
    assert (config["text_encoder.r"], config["text_encoder.lora_alpha"]) == (2, 2)
    assert not any(k.endswith(".alpha") for k in read_header(diffusers_file).tensors)


def test_inspect_reports_the_unets_trained_scale(diffusers_file: Path) -> None:
    result = inspect_file(diffusers_file)
    assert result.ok and result.detection is not None and result.detection.lora is not None
    # the text encoder's alpha equals its rank (x1): nothing to say about it
    assert result.detection.lora.trained_scale == (
        TrainedScale(component="unet", alpha=16.0, rank=4, scale=4.0),
    )
    lora = result.to_json()["lora"]
    assert lora["trained_scale"] == [
        {
            "component": "unet",
            "alpha": 16.0,
            "rank": 4,
            "scale": 4.0,
            "rslora": False,
            "varies": False,
            "dora": False,
        }
    ]
    table = format_table([result])
    assert (
        "  alpha     trained at alpha 16 / rank 4 (x4.0): ComfyUI and Loadout apply it at x1 — "
        "set strength 4.0 for the trained effect"
    ) in table


def test_both_components_are_named_when_both_differ(tmp_path: Path) -> None:
    path = pipeline_lora(tmp_path, unet=(8, 4), text_encoder=(2, 8))
    scales = inspect_file(path).to_json()["lora"]["trained_scale"]
    assert [(s["component"], s["scale"]) for s in scales] == [("text_encoder", 4.0), ("unet", 0.5)]
    table = format_table([inspect_file(path)])
    assert "text_encoder: trained at alpha 8 / rank 2 (x4.0)" in table
    assert "set text-encoder strength 4.0" in table and "unet: trained at alpha 4 / rank 8 (x0.5)" in table


def test_a_models_own_adapter_has_an_unprefixed_config(tmp_path: Path) -> None:
    result = inspect_file(model_lora(tmp_path, r=4, alpha=16))
    assert result.detection is not None and result.detection.lora is not None
    assert [(t.component, t.scale) for t in result.detection.lora.trained_scale] == [("", 4.0)]


def test_rslora_and_patterns(tmp_path: Path) -> None:
    path = pipeline_lora(
        tmp_path, unet=(4, 16), text_encoder=None, use_rslora=True, alpha_pattern={"to_q": 4}
    )
    (t,) = inspect_file(path).detection.lora.trained_scale  # type: ignore[union-attr]
    assert (t.scale, t.rslora, t.varies) == (8.0, True, True)  # 16 / sqrt(4); to_q: 4 / sqrt(4)
    assert "sqrt(rank 4) (rsLoRA)" in format_table([inspect_file(path)])


def test_a_dora_says_the_strength_only_comes_close(tmp_path: Path) -> None:
    path = pipeline_lora(tmp_path, unet=(4, 8), text_encoder=None, use_dora=True)
    result = inspect_file(path)
    (t,) = result.detection.lora.trained_scale  # type: ignore[union-attr]
    assert (t.scale, t.dora) == (2.0, True)
    assert "a DoRA: the strength scales the whole change" in format_table([result])


def test_alpha_tensors_win(diffusers_file: Path, tmp_path: Path) -> None:
    path = _rewrite(diffusers_file, tmp_path / "with-alpha.safetensors", _metadata(diffusers_file), alpha=4.0)
    result = inspect_file(path)
    assert result.ok and result.detection is not None and result.detection.lora is not None
    assert result.detection.lora.trained_scale == ()
    assert "alpha " not in format_table([result]).replace("alpha 16", "")


@pytest.mark.parametrize(
    "metadata",
    [
        {"lora_adapter_metadata": "{not json"},
        {"lora_adapter_metadata": "[1, 2]"},
        {"lora_adapter_metadata": '"text"'},
        {"lora_adapter_metadata": json.dumps({"unet.r": "four", "unet.lora_alpha": 16})},
        {"lora_adapter_metadata": json.dumps({"unet.r": 4, "unet.lora_alpha": True})},
        {"lora_adapter_metadata": json.dumps({"unet.r": 0, "unet.lora_alpha": 16})},
        {"lora_adapter_metadata": json.dumps({"unet.r": 4, "unet.lora_alpha": -16})},
        {"lora_adapter_metadata": json.dumps({"unet.r": 4.5, "unet.lora_alpha": 16})},
        {"lora_adapter_metadata": json.dumps({"unet.r": 4, "unet.lora_alpha": None})},
        {"lora_adapter_metadata": json.dumps({"unet.r": [4], "unet.lora_alpha": {"a": 1}})},
        {"lora_adapter_metadata": '{"unet.r": 4, "unet.lora_alpha": Infinity}'},
        {"lora_adapter_metadata": json.dumps({"unet.r": 32, "unet.lora_alpha": 16})},  # shapes say rank 4
        {"lora_adapter_metadata": json.dumps({"unet.lora_alpha": 16})},  # no rank
        {"lora_adapter_metadata": json.dumps({"vae.r": 4, "vae.lora_alpha": 16, "unet.r": 4})},
        {"lora_adapter_metadata": json.dumps({"unet.r": 4, "unet.lora_alpha": 4})},  # x1
        {"lora_adapter_metadata": "[" * 100_000},
        {},
    ],
)
def test_malformed_or_silent_metadata_says_nothing_and_never_fails(
    diffusers_file: Path, tmp_path: Path, metadata: dict[str, str]
) -> None:
    result = inspect_file(_rewrite(diffusers_file, tmp_path / "m.safetensors", metadata))
    assert result.ok and result.detection is not None and result.detection.lora is not None
    assert result.detection.lora.trained_scale == ()
    assert "trained at" not in format_table([result])


def test_metadata_given_as_plain_header_keys_is_read_too(diffusers_file: Path, tmp_path: Path) -> None:
    """Some tools flatten the config into the header itself: ``unet.lora_alpha`` = "16" as text."""
    path = _rewrite(diffusers_file, tmp_path / "flat.safetensors", {"unet.r": "4", "unet.lora_alpha": "16"})
    assert [t.scale for t in inspect_file(path).detection.lora.trained_scale] == [4.0]  # type: ignore[union-attr]


def test_files_of_one_structure_keep_their_own_metadata(diffusers_file: Path, tmp_path: Path) -> None:
    """Detection memoizes by tensor structure: two files alike in shapes, unlike in alpha, differ."""
    meta = _metadata(diffusers_file)
    config = json.loads(meta["lora_adapter_metadata"])
    config["unet.lora_alpha"] = 8
    other = _rewrite(
        diffusers_file, tmp_path / "other.safetensors", {"lora_adapter_metadata": json.dumps(config)}
    )
    first, second = inspect_file(diffusers_file), inspect_file(other)
    assert first.index is not None and second.index is not None
    assert first.index.structure == second.index.structure
    assert [t.scale for t in first.detection.lora.trained_scale] == [4.0]  # type: ignore[union-attr]
    assert [t.scale for t in second.detection.lora.trained_scale] == [2.0]  # type: ignore[union-attr]


def test_no_metadata_or_no_modules_reads_nothing(diffusers_file: Path) -> None:
    header = read_header(diffusers_file)
    analysis = analyze_lora(KeyView(header.tensors), None)
    assert analysis is not None and analysis.summary.trained_scale == ()
    assert trained_scales(header.metadata, ()) == ()


def test_the_record_survives_the_library_cache(diffusers_file: Path) -> None:
    from core.library.entry import _lora

    record = inspect_file(diffusers_file).to_json()["lora"]
    summary = _lora(json.loads(json.dumps(record)))
    assert summary is not None and summary.trained_scale[0].scale == 4.0
    old = {k: v for k, v in record.items() if k != "trained_scale"}  # a cache from before the field
    assert _lora(old).trained_scale == ()  # type: ignore[union-attr]
