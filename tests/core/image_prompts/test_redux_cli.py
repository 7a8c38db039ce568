"""``loadout generate --redux FILE:PICTURE[:STRENGTH]`` with FLUX.1 files as artists have them, in a
ComfyUI layout (``models/style_models``, ``models/clip_vision``: the image encoder is found there
when ``--image-encoder`` is not given): real-width SigLIP (1 layer) and Redux (bfloat16, 1152 ->
12288 -> 4096), a small FLUX.1 [dev] network taking T5-XXL's 4096-wide context. The picture is the
same on a small simulated card (everything streamed) as with room for everything, the PNG names the
pictures, strengths and strength types (one picture "multiply", one "attn_bias": ComfyUI's
StyleModelApply) and reads back, and what cannot be used is refused in words."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from app.demo import TINY_CLIP
from core.generate.redux import ReduxParameters, redux_in
from core.loading.architectures import CLIP, FLUX
from tests.core.generate.reference import vae_pair
from tests.fixtures.cli_runs import Made, flux_args, generate, pixels, refused
from tests.fixtures.demo_copy import DemoAt
from tests.fixtures.drawn import landscape
from tests.fixtures.image_prompt_files import hf_redux, hf_siglip, save
from tests.fixtures.tiny_models import FLUX_DEV, TINY_T5, Tiny

pytest.importorskip("sentencepiece")
pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

WIDE = dataclasses.replace(FLUX_DEV, vec_in_dim=768, context_in_dim=4096)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from core.models.vae import FLUX_LATENT
    from tests.core.generate.reference import t5_tokenizers

    root = tmp_path_factory.mktemp("comfy") / "ComfyUI" / "models"
    for folder in ("diffusion_models", "text_encoders", "vae", "style_models", "clip_vision"):
        (root / folder).mkdir(parents=True)
    out = {
        "flux": root / "diffusion_models" / "flux1-dev.safetensors",
        "clip": root / "text_encoders" / "clip_l.safetensors",
        "t5": root / "text_encoders" / "t5xxl_fp16.safetensors",
        "vae": root / "vae" / "ae.safetensors",
        "redux": root / "style_models" / "flux1-redux-dev.safetensors",
    }
    save_file(Tiny("flux-dev", FLUX, "flux-dev", WIDE, seed=31).file_state(), str(out["flux"]))
    clip = Tiny("clip-l-full-vocabulary", CLIP, "clip-l", TINY_CLIP, seed=32, layout="transformers")
    save_file(clip.file_state(), str(out["clip"]))
    save_file(TINY_T5.file_state(), str(out["t5"]))
    save_file({k: v.contiguous() for k, v in vae_pair(16, FLUX_LATENT, seed=33)[1].state_dict().items()},
              str(out["vae"]))  # fmt: skip
    save(hf_redux(4096, seed=34), out["redux"], torch.bfloat16)
    save(hf_siglip(layers=1, seed=35), root / "clip_vision" / "sigclip_vision_patch14_384.safetensors")
    t5_tokenizers(root.parent / "t5_tokenizer")
    out["tokenizer"] = root.parent / "t5_tokenizer"
    out["house"] = landscape(root.parent / "house.png", 120, 80)
    out["sky"] = landscape(root.parent / "sky,blue.png", 50, 90)
    return out


def _args(f: dict[str, Path]) -> list[str]:
    return flux_args(f["flux"], f["clip"], f["t5"], f["vae"], "a red door", 5, sampler=None, scheduler=None)


def test_redux_from_the_command_line_is_placed_named_and_the_same_on_a_small_card(
    files: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    redux = (
        "--redux",
        f"{files['redux']}:{files['house']}:0.8",
        "--redux",
        f"{files['redux']}:{files['sky']}:0.5:attn_bias",
    )
    small = generate(_args(files), tmp_path / "small.png", *redux, "--vram-limit", "320MiB", capsys=capsys)
    roles = {e["role"] for e in small.events}
    assert {"image_encoder", "style_model"} <= roles  # placed by the manager
    kinds = {(e["role"], e["kind"]) for e in small.events}
    moved = {k for role, k in kinds if role in ("image_encoder", "style_model")}
    assert moved & {"partial_load", "partial_unload", "unload"}  # the card has no room for all at once
    whole = generate(_args(files), tmp_path / "whole.png", *redux)
    assert np.array_equal(small.pixels, whole.pixels)  # bit for bit
    plain = generate(_args(files), tmp_path / "plain.png")
    assert np.abs(small.pixels - plain.pixels).mean() > 1

    found = redux_in(small.parameters.extra)
    assert [(r.model, r.picture, r.strength, r.strength_type) for r in found] == [
        ("flux1-redux-dev", "house.png", 0.8, "multiply"),
        ("flux1-redux-dev", "skyblue.png", 0.5, "attn_bias"),
    ]  # fmt: skip
    assert all(isinstance(r, ReduxParameters) and len(r.hash) == 12 for r in found)


def test_what_cannot_be_used_is_refused_in_words(
    files: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    demo_library_at: DemoAt,
) -> None:
    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    lone = tmp_path / "elsewhere" / "flux1-redux-dev.safetensors"
    lone.parent.mkdir()
    lone.write_bytes(files["redux"].read_bytes())
    not_a_picture = tmp_path / "notes.png"
    not_a_picture.write_text("not a picture")
    demo = demo_library_at(tmp_path / "demo")  # the process's one demo library, copied
    house = f"{files['redux']}:{files['house']}"
    cases = [
        (_args(files), ("--redux", f"{lone}:{files['house']}"), "clip_vision"),
        (_args(files), ("--redux", f"{files['redux']}:{not_a_picture}"), "not a picture"),
        (_args(files), ("--redux", f"{house}:11"), "Redux strength"),
        (_args(files), ("--redux", f"{house}:0:attn_bias"), "log of 0 is minus infinity"),
        (_args(files), ("--redux", f"{house}:1:add"), "not a Redux strength type"),
        (_args(files), ("--redux", house, "--image-encoder", str(files["t5"])), "not an image encoder"),
        (
            ["generate", str(demo.checkpoint), "--prompt", "x", "--size", "64x64", "--steps", "1"],
            ("--redux", house),
            "FLUX.1 models",
        ),
    ]
    for i, (args, extra, words) in enumerate(cases):
        err = refused(args, tmp_path / f"{i}.png", capsys, *extra)
        assert words in err, err


def test_a_redux_strength_grid_cell_is_a_plain_generation_at_that_strength(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--x redux-strength:...`` sets the first Redux picture's strength (its type kept): a cell
    equals ``--redux`` at that strength bit for bit and its PNG names it; refused without a Redux
    picture, and at strength 0 for an attn_bias picture, before anything runs."""
    from core.errors import LoadoutError
    from core.generate.request import ImageSettings
    from core.generate.workflow_request import ReduxUse
    from core.queue.grid import image_cells, parse_axis

    monkeypatch.setenv("LOADOUT_T5_TOKENIZER", str(files["tokenizer"]))
    grid = tmp_path / "grid"
    redux = f"{files['redux']}:{files['house']}:0.2:attn_bias"
    generate(_args(files), grid, "--redux", redux, "--x", "redux-strength:0.3,1.5")
    one = generate(
        _args(files), tmp_path / "one.png", "--redux", f"{files['redux']}:{files['house']}:1.5:attn_bias"
    )
    assert np.array_equal(pixels(grid / "x1-y0-z0.png"), one.pixels)
    assert not np.array_equal(pixels(grid / "x0-y0-z0.png"), one.pixels)
    found = [redux_in(Made(grid / f"x{i}-y0-z0.png", None).parameters.extra)[0] for i in (0, 1)]
    assert [(r.strength, r.strength_type) for r in found] == [(0.3, "attn_bias"), (1.5, "attn_bias")]
    with pytest.raises(LoadoutError, match="needs a FLUX Redux picture"):
        image_cells(ImageSettings("a door"), None, parse_axis("redux-strength:0.5,1"))
    biased = ImageSettings("a door", redux=(ReduxUse(files["redux"], files["house"], 0.5, "attn_bias"),))
    with pytest.raises(LoadoutError, match="strength 0"):
        image_cells(biased, None, parse_axis("redux-strength:0,1"))
