"""Merged files equal ComfyUI's patch arithmetic on the tensors, bit for bit: computed here with
plain torch, key by key, on tiny real-architecture SD1 / SDXL / FLUX.1 / Z-Image files (real key
names, real detection), per block, three-way, into a diffusion-model-only B, and the recipe read
back from the file's metadata."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from core.merging.merge import merge_models
from core.merging.recipe import RECIPE_KEY, MergeMethod, MergeRecipe, read_recipe
from tests.core.merging.util import UNET, add_difference, checkpoints, patch, varied, weighted
from tests.fixtures.diffusion_layouts_dit import z_image
from tests.fixtures.st_files import write_tensors

pytestmark = pytest.mark.usefixtures("one_thread")


def _load(p: Path) -> dict[str, torch.Tensor]:
    return load_file(str(p))


def test_weighted_sd1_is_comfyui_model_merge_simple_and_keeps_the_rest_of_a(tmp_path: Path) -> None:
    a, b = checkpoints(tmp_path, "sd1", 2, (None, torch.bfloat16))  # B's UNet in bf16: cast to fp32
    out = merge_models([a, b], MergeRecipe(MergeMethod.WEIGHTED, 0.3), tmp_path / "out.safetensors")
    got, A, B = _load(out.path), _load(a), _load(b)
    assert list(got) == list(A)  # A's keys, in A's order
    merged = 0
    for key, value in got.items():
        if key.startswith(UNET) and value.is_floating_point():
            want = weighted(A[key], B[key], 0.3).to(A[key].dtype)
            merged += 1
        else:
            want = A[key]  # the VAE, the text encoder, the scheduler buffers: A's
        assert value.dtype == want.dtype and torch.equal(value, want), key
    assert merged == out.merged and out.copied == len(A) - merged and out.device == "cpu"
    assert not torch.equal(got[UNET + "out.2.weight"], A[UNET + "out.2.weight"])


def test_ratio_belongs_to_model_a_as_in_comfyui(tmp_path: Path) -> None:
    a, b = checkpoints(tmp_path, "sd1", 2, unet_only=True)
    key = "input_blocks.0.0.weight"
    one = merge_models([a, b], MergeRecipe(MergeMethod.WEIGHTED, 1.0), tmp_path / "one.safetensors")
    zero = merge_models([a, b], MergeRecipe(MergeMethod.WEIGHTED, 0.0), tmp_path / "zero.safetensors")
    assert torch.equal(_load(one.path)[key], _load(a)[key])  # ratio 1: model A alone
    assert torch.equal(_load(zero.path)[key], _load(b)[key])  # ratio 0: model B's weights


def _comfy_blocks_ratio(inner: str, blocks: dict[str, float], default: float) -> float:
    """ModelMergeBlocks: the longest argument name the key starts with."""
    best = max((p for p in blocks if inner.startswith(p)), key=len, default=None)
    return default if best is None else blocks[best]


def test_per_block_sdxl_with_comfyui_prefix_rules(tmp_path: Path) -> None:
    """ModelMergeBlocks' ``input``/``middle``/``out`` (``out`` also takes ``output_blocks``) and
    ModelMergeSDXL's own names, the longest winning; other keys take the recipe's ratio."""
    a, b = checkpoints(tmp_path, "sdxl", 2, unet_only=True)
    blocks = {"in": 0.2, "mid": 0.5, "out": 0.9, "output_blocks.2": 0.35, "label_emb.": 0.05}
    recipe = MergeRecipe(MergeMethod.WEIGHTED, 0.6, tuple(blocks.items()))
    out = merge_models([a, b], recipe, tmp_path / "xl.safetensors", dtype=torch.float32)
    got, A, B = _load(out.path), _load(a), _load(b)
    seen: set[float] = set()
    for key, value in got.items():
        r = _comfy_blocks_ratio(key, blocks, 0.6)
        seen.add(r)
        want = weighted(A[key], B[key], r)
        assert value.dtype == want.dtype and torch.equal(value, want), key
    assert seen == {0.2, 0.5, 0.9, 0.35, 0.05, 0.6}  # every rule was exercised (time_embed: 0.6)


def test_add_difference_three_flux_checkpoints_with_text_encoders(tmp_path: Path) -> None:
    """A + (B - C) * m as ComfyUI chains ModelMergeSubtract into ModelMergeAdd; the text encoders
    by the same method (CLIPMergeSubtract/Add), their logit_scale kept from A as ComfyUI keeps it."""
    a, b, c = checkpoints(tmp_path, "flux-dev", 3, (None, torch.bfloat16, torch.float32))
    recipe = MergeRecipe(MergeMethod.ADD_DIFFERENCE, 0.7, (("double_blocks.1.", -1.5),), text_encoders=0.4)
    out = merge_models([a, b, c], recipe, tmp_path / "flux.safetensors")
    got, A, B, C = _load(out.path), _load(a), _load(b), _load(c)
    te = 0
    for key, value in got.items():
        if key.startswith(UNET):
            m = -1.5 if key.startswith(UNET + "double_blocks.1.") else 0.7
            want = add_difference(A[key], B[key], C[key], m).to(A[key].dtype)
        elif key.startswith("text_encoders.") and not key.endswith((".logit_scale", ".position_ids")):
            want, te = add_difference(A[key], B[key], C[key], 0.4).to(A[key].dtype), te + 1
        else:
            want = A[key]
        assert torch.equal(value, want), key
    scale = "text_encoders.clip_l.logit_scale"
    assert te > 0 and torch.equal(got[scale], A[scale])


def test_subtract_and_add_with_a_diffusion_model_file_as_b(tmp_path: Path) -> None:
    """ModelMergeSubtract / ModelMergeAdd; B is the UNet alone (its keys without the checkpoint
    prefix): matched part by part, the output in A's layout."""
    a, full_b = checkpoints(tmp_path, "sd1", 2)
    unet_b = {k[len(UNET) :]: v for k, v in _load(full_b).items() if k.startswith(UNET)}
    b = write_tensors(tmp_path / "unet-b.safetensors", unet_b)
    A = _load(a)
    for method, number in ((MergeMethod.SUBTRACT, 2.5), (MergeMethod.ADD, 1.0)):
        out = merge_models([a, b], MergeRecipe(method, number), tmp_path / f"{method}.safetensors")
        got = _load(out.path)
        for key, value in got.items():
            if key.startswith(UNET):
                inner = key[len(UNET) :]
                s, sm = (-number, number) if method is MergeMethod.SUBTRACT else (1.0, 1.0)
                assert torch.equal(value, patch(A[key], unet_b[inner], s, sm).half()), key
            else:
                assert torch.equal(value, A[key]), key


def test_z_image_per_layer_ratios(tmp_path: Path) -> None:
    """Next-DiT's blocks (Loadout's table: ComfyUI has no Z-Image node) on a Z-Image diffusion model."""
    gen = torch.Generator().manual_seed(7)
    layout = z_image(dim=256, layers=3, cap_feat=64, ffn=96)
    base = {k: (torch.randn(s, generator=gen) / math.sqrt(s[-1])).bfloat16() for k, s in layout.items()}
    a = write_tensors(tmp_path / "z-a.safetensors", base)
    b = write_tensors(tmp_path / "z-b.safetensors", varied(base, 3))
    blocks = (("layers.1.", 0.25), ("noise_refiner.", 0.8), ("final_layer.", 0.0))
    out = merge_models([a, b], MergeRecipe(MergeMethod.WEIGHTED, 0.5, blocks), tmp_path / "z.safetensors")
    got, A, B = _load(out.path), _load(a), _load(b)
    for key, value in got.items():
        r = next((v for p, v in blocks if key.startswith(p)), 0.5)
        assert torch.equal(value, weighted(A[key], B[key], r).bfloat16()), key
    assert torch.equal(got["final_layer.linear.weight"], B["final_layer.linear.weight"])


def test_the_recipe_is_in_the_metadata_and_read_back(tmp_path: Path) -> None:
    a, b = checkpoints(tmp_path, "sd1", 2)
    recipe = MergeRecipe(MergeMethod.WEIGHTED, 0.25, (("middle_block.", 0.75),))
    out = merge_models([a, b], recipe, tmp_path / "r.safetensors", dtype=torch.bfloat16)
    with safe_open(str(out.path), "pt") as f:
        meta = f.metadata()
    record = read_recipe(meta)
    assert record is not None and MergeRecipe.from_json(record) == recipe
    assert [(i["model"], i["file"], i["family"]) for i in record["inputs"]] == [
        ("A", a.name, "sd1"), ("B", b.name, "sd1"),
    ]  # fmt: skip
    import hashlib

    assert record["inputs"][1]["sha256"] == hashlib.sha256(b.read_bytes()).hexdigest()[:12]
    assert record["dtype"] == "bfloat16" and record["loadout"]
    assert json.loads(meta[RECIPE_KEY]) == record
