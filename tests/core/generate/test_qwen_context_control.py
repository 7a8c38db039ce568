"""DiffSynth's In-Context Control Union LoRA for Qwen-Image (core/detect/lora_qwen_control.py): a
plain LoRA in DiffSynth's PEFT names (``transformer_blocks.N.<module>.lora_A.default.weight``,
rank 64, bf16, no alpha, the twelve modules its recipe targets: the released file's 943,906,720
bytes are exactly 60 such blocks with ``{"format": "pt"}`` metadata), told by its name, whose
control picture goes to Qwen-Image as a reference latent (ComfyUI's template: VAEEncode and
ReferenceLatent on both prompts).

* At the released width (3072, one block, the real shapes: 12288-wide MLPs, 18432-wide
  modulation) the file is read as a Qwen-Image LoRA that maps onto every module, and its name
  (Comfy-Org's, or DiffSynth's folder) marks it as taking a control picture; the same tensors under
  another name do not. ``loadout inspect`` (table and JSON: ``lora.control`` "reference") and the
  library's details say so by the same decision (``union_control``) as the stack.
* On a narrow network its velocity with the control latent as a reference equals diffusers'
  transformer with the file loaded by ``QwenImagePipeline.load_lora_weights`` and the reference's
  tokens appended as diffusers' edit pipelines append them.
* Through the command: ``--lora FILE --control-picture MAP`` gives the same picture bit for bit on
  a small simulated card, and another map another picture; the LoRA without a map and a map
  without the LoRA are refused in words.

diffusers' rotary positions agree with ComfyUI's (and Loadout's) for a reference of the picture's
own size with even patch grids: for a larger reference diffusers starts the caption's positions
after the larger grid, and it centres odd grids one position lower; the parity uses the picture's
size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from app.cli import main
from core.detect.keyview import KeyView
from core.detect.lora import analyze_lora
from core.detect.lora_qwen_control import marked
from core.files.model_file import read_tensor_index
from core.loading.loader import load_diffusion_model
from core.models.qwen_image import QwenImageConfig, QwenImageDiT
from core.patching.keymap import match_lora
from core.patching.lora_stack import LoraStack
from tests.core.generate.reference_qwen_image import ours_from, pack, qwen_image_reference, unpack

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("peft")
pytestmark = [pytest.mark.usefixtures("one_thread")]

RANK = 64
#: DiffSynth's recipe (examples/qwen_image/model_training/lora/Qwen-Image-In-Context-Control-Union.sh)
MODULES = (
    "attn.to_q", "attn.to_k", "attn.to_v", "attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj",
    "attn.to_out.0", "attn.to_add_out", "img_mlp.net.2", "txt_mlp.net.2", "img_mod.1", "txt_mod.1",
)  # fmt: skip
COMFY_NAME = "qwen_image_union_diffsynth_lora.safetensors"


def _union_lora(path: Path, shapes: dict[str, tuple[int, ...]], blocks: int, scale: float) -> Path:
    """The file in the released layout for a network of these weight ``shapes``, random factors."""
    gen = torch.Generator().manual_seed(blocks)
    state: dict[str, torch.Tensor] = {}
    for b in range(blocks):
        for module in MODULES:
            out, inp = shapes[f"transformer_blocks.{b}.{module}.weight"]
            name = f"transformer_blocks.{b}.{module}"
            down, up = torch.randn(RANK, inp, generator=gen), torch.randn(out, RANK, generator=gen)
            state[f"{name}.lora_A.default.weight"] = (down * inp**-0.5).bfloat16()
            state[f"{name}.lora_B.default.weight"] = (up * scale).bfloat16()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata={"format": "pt"})
    return path


def _analysis(path: Path) -> Any:
    index = read_tensor_index(path)
    meta = {k: v for k, v in index.metadata.items() if isinstance(v, str)}
    found = analyze_lora(KeyView(index.tensors), meta)
    assert found is not None
    return marked(found, path)


def test_the_released_layout_at_its_width_maps_fully_and_its_name_marks_it(tmp_path: Path) -> None:
    with torch.device("meta"):
        real = QwenImageDiT(QwenImageConfig(n_layers=1), device="meta")
    shapes = {k: tuple(v.shape) for k, v in real.state_dict().items()}
    assert shapes["transformer_blocks.0.img_mod.1.weight"] == (18432, 3072)
    lora = _union_lora(tmp_path / COMFY_NAME, shapes, 1, 0.01)
    analysis = _analysis(lora)
    assert analysis.base_family == "qwen-image" and analysis.summary.rank == RANK
    assert analysis.summary.modules == len(MODULES) and analysis.control_reference
    assert any("In-Context Control Union" in w for w in analysis.warnings)
    report = match_lora(analysis, [("diffusion_model", "qwen-image", shapes, real.config)])
    assert len(report.matched) == len(MODULES) and report.unmatched == [] and report.shape_mismatches == []
    folder = tmp_path / "Qwen-Image-In-Context-Control-Union" / "model.safetensors"  # DiffSynth's own
    lora.parent.joinpath(folder.parent.name).mkdir()
    lora.rename(folder)
    assert _analysis(folder).control_reference
    assert _says_union_control(folder, tmp_path / "lib")  # inspect and the library, by the folder's name
    other = folder.rename(tmp_path / "my_style_lora.safetensors")  # the weights alone do not tell it
    assert not _analysis(other).control_reference and not _says_union_control(other, tmp_path / "lib2")
    comfy = other.rename(tmp_path / COMFY_NAME)
    assert _analysis(comfy).control_reference and _says_union_control(comfy, tmp_path / "lib3")


def _says_union_control(lora: Path, library: Path) -> bool:
    """Whether ``loadout inspect`` (table and JSON) and the library's details call the file what
    the engine takes it for (:func:`_analysis`: the stack's own decision): a Qwen-Image union
    control LoRA, recognised by its name, reading a control picture."""
    import contextlib
    import io
    import json
    import shutil

    from app.gui.details import entry_html
    from core.library import LibraryIndex, ModelRoot

    engine = _analysis(lora).control_reference
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["inspect", "--json", str(lora)]) == 0
        assert main(["inspect", str(lora)]) == 0
    text = out.getvalue()
    record = json.loads(text[: text.rindex("]") + 1])[0]
    words = "control   a Qwen-Image union control LoRA (DiffSynth's, recognised by its file name): it reads"
    said = (record["kind"], record["lora"]["control"], words in text)
    assert said in (("lora", "reference", True), ("lora", None, False)), said
    copy = library / lora.parent.name / lora.name  # the folder's name goes with it
    copy.parent.mkdir(parents=True)
    shutil.copy(lora, copy)
    index = LibraryIndex([ModelRoot(library, "loras", "folder")])
    for _ in index.scan():
        pass
    (entry,) = index.entries()
    shown = "a Qwen-Image union control LoRA" in entry_html(entry)
    assert entry.lora is not None and (entry.lora.control == "reference") == shown
    assert engine == (said[1] == "reference") == shown  # one decision, three places
    return engine


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, Path]:
    folder = tmp_path_factory.mktemp("qwen_union")
    hf = qwen_image_reference(dim=256, heads=2, layers=2, seed=21)
    model = folder / "qwen_image.safetensors"
    save_file({k: v.contiguous() for k, v in ours_from(hf).state_dict().items()}, str(model))
    shapes = {k: tuple(v.shape) for k, v in hf.state_dict().items()}
    return hf, model, _union_lora(folder / COMFY_NAME, shapes, 2, 0.05)


def test_the_control_latent_as_a_reference_matches_diffusers(narrow: tuple[Any, Path, Path]) -> None:
    hf, model, lora = narrow
    loaded = load_diffusion_model(model)
    stack = LoraStack([loaded])
    entry = stack.add(lora)
    assert entry.analysis.control_reference and entry.skipped == [] and entry.report.unmatched == []
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 16, 8, 8, generator=gen)
    ref = torch.randn(1, 16, 8, 8, generator=gen).expand(2, -1, -1, -1)  # the map's latent, each item
    sigma, ctx = torch.tensor([0.9, 0.35]), torch.randn(2, 9, 3584, generator=gen)
    with torch.no_grad():
        plain = loaded.module(x, sigma, ctx, references=(ref,))
        stack.apply()
        ours = loaded.module(x, sigma, ctx, references=(ref,))

    pipe = diffusers.QwenImagePipeline(
        scheduler=diffusers.FlowMatchEulerDiscreteScheduler(), vae=None, text_encoder=None, tokenizer=None,
        transformer=hf,
    )  # fmt: skip
    pipe.load_lora_weights(str(lora))  # DiffSynth's ``.default.`` names: diffusers converts them
    tokens = torch.cat([pack(x), pack(ref)], dim=1)  # the edit pipelines' order
    shapes = [[(1, 4, 4), (1, 4, 4)]] * 2  # the map at the picture's size (see the module)
    mask = torch.ones(ctx.shape[:2], dtype=torch.long)
    with torch.no_grad():
        out = hf(tokens, ctx, mask, sigma, img_shapes=shapes, return_dict=False)[0]
    want = unpack(out[:, :16], 8, 8)
    rel = float((ours - want).norm() / (want - plain).norm())
    print(f"union LoRA + reference: |ours - diffusers| / |LoRA's change| = {rel:.1e}")
    assert rel < 1e-4 and float((want - plain).abs().max()) > 1e-2


def _qwen_files(folder: Path) -> tuple[Path, Path, Path]:
    from tests.core.generate.test_generate_qwen_image_cli import _files

    return _files(folder)


@pytest.mark.slow  # the Qwen2.5-VL tower file at its real vocabulary and width is most of it
def test_the_command_line_gives_the_map_to_the_union_lora_on_any_card(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, text, ae = _qwen_files(tmp_path)
    shapes = {k: tuple(v.shape) for k, v in load_diffusion_model(model).module.state_dict().items()}
    lora = _union_lora(tmp_path / COMFY_NAME, shapes, 2, 0.05)
    edges = tmp_path / "edges.png"
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (48, 80, 3), dtype=np.uint8)).save(edges)
    base = [
        "generate", "--diffusion-model", str(model), "--text-encoder", str(text), "--vae", str(ae),
        "--prompt", "a red fox", "--steps", "2", "--cfg", "1", "--size", "64x64", "--seed", "7", "--quiet",
    ]  # fmt: skip

    def run(name: str, *extra: str) -> np.ndarray:
        assert main([*base, "-o", str(tmp_path / name), *extra]) == 0, capsys.readouterr().err
        with Image.open(tmp_path / name) as im:
            return np.asarray(im.convert("RGB")).astype(np.int32)

    control = ("--lora", str(lora), "--control-picture", str(edges))
    memory = run("a.png", *control)
    assert np.array_equal(memory, run("b.png", *control, "--vram-limit", "40MiB"))
    edges_later = tmp_path / "other.png"
    Image.fromarray(np.full((48, 80, 3), 128, dtype=np.uint8)).save(edges_later)
    # another map, another picture: the map reaches the network (a dropped one would leave the bits)
    other = run("c.png", "--lora", str(lora), "--control-picture", str(edges_later))
    assert not np.array_equal(memory, other)
    with Image.open(tmp_path / "a.png") as im:
        assert 'Control picture: edges.png [' in im.text["parameters"]
    for extra, says in (
        (("--lora", str(lora)), "needs a control picture"),
        (("--control-picture", str(edges)), "takes none"),
    ):
        out = tmp_path / "refused.png"
        assert main([*base, "-o", str(out), *extra]) != 0
        assert says in capsys.readouterr().err and not out.exists()


def test_the_map_is_one_reference_at_its_own_size_on_both_prompts(tmp_path: Path) -> None:
    """ComfyUI's template: VAEEncode of the map as it is, ReferenceLatent on positive and negative;
    reference pictures beside it are refused in words."""
    from core.archs.references import AsGiven
    from core.errors import LoadoutError
    from core.generate.control_picture import reference_control_pass
    from core.generate.request import ImageSettings

    edges = tmp_path / "edges.png"
    rgb = np.zeros((48, 80, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(edges)
    made = reference_control_pass(ImageSettings("a fox"), edges, rgb)
    assert isinstance(made.rule, AsGiven) and made.rule.negative and made.rule.most == 1
    assert made.rule.scale(80, 48).method == "none" and made.pictures[0].rgb is rgb
    with pytest.raises(LoadoutError, match="reference pictures were given beside"):
        reference_control_pass(ImageSettings("a fox", references=(edges,)), edges, rgb)
