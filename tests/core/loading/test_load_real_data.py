"""Real-layout files with real data load and run: tiny configs of every network, real prefixes.

Files are written from seeded random state dicts (``tests.fixtures.tiny_models``) under the prefixes
released checkpoints use, and as standalone component files. The tiny configs keep the widths
detection reads, so every file goes through the public loaders, detection included. Each loaded
component is compared with the same network loaded the plain way (``load_state_dict``): weights
bit for bit, forward passes bit for bit.
"""

from __future__ import annotations

import hashlib
import itertools
import shutil
from pathlib import Path

import pytest
import torch

from core.errors import InterruptedByUser
from core.files.safetensors import read_header
from core.loading.assign import LoadProgress, interrupt_check
from core.loading.loader import (
    LoadedComponent,
    LoadOptions,
    ModelBundle,
    load_checkpoint,
    load_diffusion_model,
    load_text_encoder,
    load_vae,
)
from tests.fixtures.st_files import write_tensors
from tests.fixtures.tiny_models import (
    CHECKPOINTS,
    SCHEDULER_EXTRAS,
    STANDALONE,
    TINY_CLIP_G,
    TINY_VAE_4,
    Tiny,
    checkpoint_tensors,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: as fast, spins against nothing

LOADERS = {"diffusion_model": load_diffusion_model, "vae": load_vae, "text_encoder": load_text_encoder}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One safetensors file per tiny checkpoint (by family), written once."""
    root = tmp_path_factory.mktemp("checkpoints")
    return {fam: write_tensors(root / f"{fam}.safetensors", checkpoint_tensors(fam)) for fam in CHECKPOINTS}


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One safetensors file per standalone component (by tiny name), written once."""
    root = tmp_path_factory.mktemp("components")
    return {t.name: write_tensors(root / f"{t.name}.safetensors", t.file_state()) for t in STANDALONE}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_same_weights(loaded: LoadedComponent, tiny: Tiny) -> None:
    got = loaded.module.state_dict()
    want = tiny.state()
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key].dtype == value.dtype, key
        assert torch.equal(got[key], value), key
    assert not any(p.requires_grad for p in loaded.module.parameters())


def assert_same_forward(loaded: LoadedComponent, tiny: Tiny) -> None:
    assert not loaded.module.training
    got = tiny.forward(loaded.module)
    want = tiny.forward(tiny.reference())
    assert len(got) == len(want) >= 1
    for g, w in zip(got, want, strict=True):
        assert torch.isfinite(g).all()
        assert g.shape == w.shape and torch.equal(g, w)


def by_prefix(bundle: ModelBundle) -> dict[str, LoadedComponent]:
    return {c.prefix: c for c in bundle.components}


# --- whole checkpoints ------------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(CHECKPOINTS))
def test_checkpoint_loads_every_component_and_runs(files: dict[str, Path], family: str) -> None:
    path = files[family]
    before = sha256(path)
    bundle = load_checkpoint(path)
    assert bundle.detection.kind == "checkpoint" and bundle.detection.family == family
    assert bundle.diffusion_model is not None and bundle.vae is not None
    loaded = by_prefix(bundle)
    assert loaded.keys() == CHECKPOINTS[family].keys()
    assert len(bundle.components) == len(CHECKPOINTS[family])  # each component loaded once
    assert [c.prefix for c in bundle.detection.components] == list(CHECKPOINTS[family])
    # what no component took is exactly the file's leftovers (ComfyUI's logit_scale scalars...)
    want_extras = checkpoint_tensors(family).keys() - checkpoint_tensors(family, extras=False).keys()
    assert bundle.extras.keys() == want_extras
    for prefix, tiny in CHECKPOINTS[family].items():
        comp = loaded[prefix]
        assert (comp.role, comp.family, comp.layout) == (tiny.role, tiny.family, tiny.layout), prefix
        assert comp.config == tiny.config, prefix  # the network planned from shapes is the one written
        assert_same_weights(comp, tiny)
        assert_same_forward(comp, tiny)
    assert sha256(path) == before


def test_leftover_tensors_are_kept_as_lazy_extras(files: dict[str, Path]) -> None:
    bundle = load_checkpoint(files["sd1"])
    assert bundle.extras.keys() == SCHEDULER_EXTRAS.keys()
    for key, value in SCHEDULER_EXTRAS.items():
        got = bundle.extras[key]()
        assert got.dtype == value.dtype and torch.equal(got, value)
    assert load_checkpoint(files["sdxl"]).extras == {}


@pytest.mark.parametrize("tiny", STANDALONE, ids=[t.name for t in STANDALONE])
def test_standalone_component_file_loads_and_runs(parts: dict[str, Path], tiny: Tiny) -> None:
    comp = LOADERS[tiny.role](parts[tiny.name])
    assert (comp.role, comp.family, comp.prefix, comp.layout) == (tiny.role, tiny.family, "", tiny.layout)
    assert comp.config == tiny.config
    assert_same_weights(comp, tiny)
    assert_same_forward(comp, tiny)


def test_component_loaders_take_their_part_of_a_checkpoint(files: dict[str, Path]) -> None:
    parts = CHECKPOINTS["sdxl"]
    unet = load_diffusion_model(files["sdxl"])
    vae = load_vae(files["sdxl"])
    te = load_text_encoder(files["sdxl"])  # the first text encoder of the file
    for comp, prefix in (
        (unet, "model.diffusion_model."),
        (vae, "first_stage_model."),
        (te, "conditioner.embedders.0.transformer."),
    ):
        assert comp.prefix == prefix
        assert_same_weights(comp, parts[prefix])


# --- zero copy, dtype ---------------------------------------------------------------------------------


def test_weights_are_views_of_the_file_mapping(files: dict[str, Path]) -> None:
    """Every weight sits at its own file offset inside one mapping: nothing was copied."""
    path = files["sdxl"]
    header = read_header(path)
    bundle = load_checkpoint(path)
    bases: set[int] = set()
    for comp in bundle.components:
        state = comp.module.state_dict()
        for key, tensor in state.items():
            if comp.layout == "open_clip":
                continue  # renamed and split: checked below
            begin, _ = header.offsets[comp.prefix + key]
            assert tensor.dtype == torch.float32
            bases.add(tensor.data_ptr() - (header.data_start + begin))
    assert len(bases) == 1  # one mapping, each tensor at its offset
    [base] = bases
    # open_clip: q / k / v are row slices of the fused in_proj_weight, still inside the mapping
    clip_g = by_prefix(bundle)["conditioner.embedders.1.model."].module.state_dict()
    fused, _ = header.offsets["conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight"]
    width = TINY_CLIP_G.config.hidden_size
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
        t = clip_g[f"text_model.encoder.layers.0.self_attn.{name}.weight"]
        assert t.data_ptr() == base + header.data_start + fused + i * width * width * 4


def test_modifying_a_loaded_weight_does_not_touch_the_file(tmp_path: Path, parts: dict[str, Path]) -> None:
    path = Path(shutil.copy(parts[TINY_VAE_4.name], tmp_path / "vae.safetensors"))
    before = sha256(path)
    vae = load_vae(path)
    weight = vae.module.state_dict()["decoder.conv_in.weight"]
    with torch.no_grad():
        weight.add_(1.0)
    assert not torch.equal(weight, TINY_VAE_4.state()["decoder.conv_in.weight"])
    del vae, weight
    assert sha256(path) == before
    assert_same_weights(load_vae(path), TINY_VAE_4)


@pytest.fixture(scope="module")
def fp16_sd1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tensors = {k: v.half() if v.is_floating_point() else v for k, v in checkpoint_tensors("sd1").items()}
    return write_tensors(tmp_path_factory.mktemp("fp16") / "sd1-fp16.safetensors", tensors)


def test_fp16_file_keeps_its_dtype_without_copying(fp16_sd1: Path) -> None:
    header = read_header(fp16_sd1)
    bundle = load_checkpoint(fp16_sd1)
    unet = bundle.diffusion_model
    assert unet is not None
    bases = set()
    for key, tensor in unet.module.state_dict().items():
        assert tensor.dtype == torch.float16
        bases.add(tensor.data_ptr() - header.offsets["model.diffusion_model." + key][0])
    assert len(bases) == 1


def test_dtype_option_converts_an_fp16_file(fp16_sd1: Path) -> None:
    bundle = load_checkpoint(fp16_sd1, LoadOptions(dtype=torch.float32))
    for prefix, tiny in CHECKPOINTS["sd1"].items():
        comp = by_prefix(bundle)[prefix]
        state = comp.module.state_dict()
        halved = {k: v.half().float() for k, v in tiny.state().items()}
        for key, value in halved.items():
            assert state[key].dtype == torch.float32 and torch.equal(state[key], value), key
        reference = tiny.architecture.build(tiny.config, "cpu", torch.float32)
        reference.load_state_dict(halved, strict=True)
        for g, w in zip(tiny.forward(comp.module), tiny.forward(reference.eval()), strict=True):
            assert torch.equal(g, w)


# --- progress and interrupt ---------------------------------------------------------------------------


def test_progress_reports_every_tensor(files: dict[str, Path]) -> None:
    events: list[LoadProgress] = []
    bundle = load_checkpoint(files["sd3"], LoadOptions(progress=events.append))
    by_component: dict[str, list[LoadProgress]] = {}
    for e in events:
        by_component.setdefault(e.component, []).append(e)
    assert len(by_component) == len(bundle.components) == 5  # MMDiT, VAE, CLIP-L, CLIP-G, T5
    for comp in bundle.components:
        seen = by_component[f"{comp.role} ({comp.family})"]
        state = comp.module.state_dict()
        total = sum(t.numel() * t.element_size() for t in state.values())
        assert [e.tensors_done for e in seen] == list(range(1, len(state) + 1))
        assert {e.tensors_total for e in seen} == {len(state)}
        assert {e.bytes_total for e in seen} == {total}
        assert all(a.bytes_done < b.bytes_done for a, b in itertools.pairwise(seen))
        assert seen[-1].bytes_done == total == comp.nbytes
    assert len(events) == sum(len(c.module.state_dict()) for c in bundle.components)


@pytest.mark.parametrize("stop_after", [0, 7, 230])
def test_interrupt_stops_the_load(files: dict[str, Path], stop_after: int) -> None:
    """The check runs before each tensor; once it raises, nothing more is assigned."""
    path = files["sd1"]
    before = sha256(path)
    calls = {"n": 0}
    events: list[LoadProgress] = []

    def flag() -> bool:
        calls["n"] += 1
        return calls["n"] > stop_after

    options = LoadOptions(progress=events.append, check=interrupt_check(flag))
    with pytest.raises(InterruptedByUser) as err:
        load_checkpoint(path, options)
    assert err.value.code == "interrupted"
    assert calls["n"] == stop_after + 1
    assert len(events) == stop_after
    if stop_after == 230:  # past the UNet: the interrupt lands inside the next component
        unet = CHECKPOINTS["sd1"]["model.diffusion_model."]
        assert len(unet.state()) < stop_after
        assert events[-1].component != events[0].component
    assert sha256(path) == before
    assert len(load_checkpoint(path).components) == 3  # nothing was left half-open


# --- pickle ---------------------------------------------------------------------------------------------


def test_pickle_checkpoint_loads_the_same_tensors(tmp_path: Path, files: dict[str, Path]) -> None:
    ckpt = tmp_path / "sd1.ckpt"
    torch.save({"state_dict": checkpoint_tensors("sd1"), "global_step": 470000}, ckpt)
    from_pickle = load_checkpoint(ckpt)
    from_st = load_checkpoint(files["sd1"])
    assert from_pickle.detection.kind == "checkpoint" and from_pickle.detection.family == "sd1"
    p, s = by_prefix(from_pickle), by_prefix(from_st)
    assert p.keys() == s.keys() == CHECKPOINTS["sd1"].keys()
    for prefix, tiny in CHECKPOINTS["sd1"].items():
        assert p[prefix].config == s[prefix].config
        a, b = p[prefix].module.state_dict(), s[prefix].module.state_dict()
        assert a.keys() == b.keys()
        assert all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
        assert_same_forward(p[prefix], tiny)
    assert from_pickle.extras.keys() == from_st.extras.keys()
