"""Hugging Face / diffusers models split into shards (``model-00001-of-00003.safetensors`` + the
index json) are ONE model: detected, checked and loaded from any shard or the index json through
the ordinary loaders (each shard memory-mapped in place), listed once by the library, every shard
held by the lease keeper; a missing or mismatched shard is refused naming the shard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from core.errors import FileAccessError, FileFormatError
from core.files.shards import expand_shards
from core.library import LibraryIndex, ModelRoot
from core.loading.check import check_file
from core.loading.convert_file import convert_file
from core.loading.loader import inspect_for_loading, load_diffusion_model, load_text_encoder
from tests.fixtures.llm_files import model_from, random_state, small_config

pytestmark = pytest.mark.usefixtures("one_thread")
IDS = torch.tensor([[3, 17, 200, 5, 9, 1, 44]])


def write_shards(
    folder: Path, tensors: dict[str, torch.Tensor], n: int, stem: str = "model", index: bool = True
) -> list[Path]:
    """``tensors`` split into ``n`` shards as transformers/diffusers save them, plus the index json."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = sorted(tensors)
    parts = [keys[i::n] for i in range(n)]
    paths, weight_map = [], {}
    for i, part in enumerate(parts, 1):
        path = folder / f"{stem}-{i:05d}-of-{n:05d}.safetensors"
        save_file({k: tensors[k].contiguous() for k in part}, str(path), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(part, path.name)
        paths.append(path)
    if index:
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        body = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / f"{stem}.safetensors.index.json").write_text(json.dumps(body))
    return paths


def _qwen_state() -> tuple[object, dict[str, torch.Tensor]]:
    cfg = small_config("qwen3-4b")
    state = random_state(cfg)
    return cfg, {k: v.to(torch.bfloat16) for k, v in state.items()}


def _hidden(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = model(IDS, None, taps=(-2,), dtype=torch.float32)[0]
    return out


def test_a_sharded_text_encoder_is_one_model_from_any_shard_or_the_index(tmp_path: Path) -> None:
    cfg, state = _qwen_state()
    shards = write_shards(tmp_path / "text_encoder", state, 3)
    index_json = tmp_path / "text_encoder" / "model.safetensors.index.json"
    reference = _hidden(model_from(cfg, state))  # type: ignore[arg-type]
    for given in (shards[0], shards[2], index_json):
        index, det = inspect_for_loading(given)
        assert (det.kind, det.family) == ("text_encoder", "qwen3-4b"), given.name
        assert set(index.tensors) == set(state)
        assert index.file_size == sum(p.stat().st_size for p in shards)
        assert check_file(given)["ok"], given.name
        loaded = load_text_encoder(given)
        assert torch.equal(_hidden(loaded.module), reference), given.name
    # read in place: a weight is a view on its shard's memory map (no copy)
    loaded = load_text_encoder(shards[0])
    assert loaded.module.model.layers[1].mlp.down_proj.weight.dtype == torch.bfloat16


def test_shards_without_an_index_json_are_found_by_their_numbers(tmp_path: Path) -> None:
    cfg, state = _qwen_state()
    shards = write_shards(tmp_path, state, 2, index=False)
    loaded = load_text_encoder(shards[1])
    assert torch.equal(_hidden(loaded.module), _hidden(model_from(cfg, state)))  # type: ignore[arg-type]


def test_a_sharded_diffusers_transformer_loads_as_the_one_file(tmp_path: Path) -> None:
    from core.models.nextdit import NextDiT, NextDiTConfig

    cfg = NextDiTConfig(dim=256, n_layers=2, n_refiner_layers=2, n_heads=2, n_kv_heads=2, ffn_hidden=512)
    gen = torch.Generator().manual_seed(3)
    state = {
        k: (torch.randn(t.shape, generator=gen) * 0.02).to(torch.bfloat16)
        for k, t in NextDiT(cfg, device="meta").state_dict().items()
    }
    whole = tmp_path / "z_image.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(whole))
    shards = write_shards(tmp_path / "transformer", state, 2, stem="diffusion_pytorch_model")
    one, split = load_diffusion_model(whole), load_diffusion_model(shards[0])
    assert split.family == one.family == "z-image"
    a, b = one.module.state_dict(), split.module.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_missing_shard_is_refused_naming_it(tmp_path: Path) -> None:
    _, state = _qwen_state()
    shards = write_shards(tmp_path, state, 3)
    shards[1].unlink()
    for given in (shards[0], tmp_path / "model.safetensors.index.json"):
        with pytest.raises(FileAccessError, match=r"model-00002-of-00003\.safetensors is missing") as err:
            load_text_encoder(given)
        assert "split into 3 files" in err.value.message


def test_a_shard_from_another_download_is_refused_naming_it(tmp_path: Path) -> None:
    _, state = _qwen_state()
    shards = write_shards(tmp_path, state, 3)
    index_json = tmp_path / "model.safetensors.index.json"
    body = json.loads(index_json.read_text())
    moved = next(k for k, v in body["weight_map"].items() if v == shards[2].name)
    body["weight_map"][moved] = shards[0].name  # the index says shard 1 holds it; shard 3 does
    index_json.write_text(json.dumps(body))
    with pytest.raises(
        FileFormatError, match=f"{shards[0].name} does not match model.safetensors.index.json"
    ):
        inspect_for_loading(shards[1])
    index_json.write_text("{ not json")
    with pytest.raises(FileFormatError, match="not a readable shard index"):
        load_text_encoder(shards[0])


def test_the_library_lists_one_entry_and_the_lease_keeper_holds_every_shard(tmp_path: Path) -> None:
    _, state = _qwen_state()
    shards = write_shards(tmp_path / "models" / "text_encoders", state, 3)
    index = LibraryIndex([ModelRoot(tmp_path / "models", None, "folder")])
    list(index.scan())
    entries = index.entries()
    assert [e.name for e in entries] == [shards[0].name]
    (entry,) = entries
    assert (entry.kind, entry.family) == ("text_encoder", "qwen3-4b")
    assert entry.size == sum(p.stat().st_size for p in shards)
    index_json = shards[0].parent / "model.safetensors.index.json"
    assert expand_shards([shards[0], None]) == [*shards, index_json, None]
    assert expand_shards([index_json]) == [*shards, index_json]


def test_convert_writes_a_split_model_as_one_file(tmp_path: Path) -> None:
    _, state = _qwen_state()
    shards = write_shards(tmp_path / "split", state, 3)
    out = tmp_path / "qwen3_4b.safetensors"
    convert_file(shards[0], out)
    back = load_file(str(out))
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)
