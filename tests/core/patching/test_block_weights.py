"""LoRA block weights: a LoRA stacked with per-block weights gives each block's weights exactly as
baking that LoRA alone at ``strength x weight`` (checked key by key against separate bakes), its
text-encoder part at ``clip strength x BASE``; a block the layout leaves out gets 0 and a key in no
block keeps the strength (A1111's lora-block-weight rules); refusals in words; the tag syntax."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from app.commands.args import parse_lora
from core.errors import LoadoutError
from core.loading.loader import ModelBundle, load_checkpoint
from core.patching.block_weights import BlockWeights
from core.patching.lora_stack import LoraStack
from tests.fixtures.st_files import write_tensors
from tests.fixtures.tiny_models import TINY_UNET_SD1, checkpoint_tensors

pytestmark = pytest.mark.usefixtures("one_thread")
#: the tiny SD1 UNet's linear layers a LoRA patches, one or more per block, and one in no block
UNET_MODULES = (
    "input_blocks.1.1.transformer_blocks.0.attn1.to_q", "input_blocks.1.1.transformer_blocks.0.attn2.to_k",
    "input_blocks.3.0.emb_layers.1", "middle_block.1.transformer_blocks.0.attn2.to_v",
    "middle_block.2.emb_layers.1", "output_blocks.0.0.emb_layers.1",
    "output_blocks.2.1.transformer_blocks.0.attn1.to_out.0",
    "output_blocks.3.1.transformer_blocks.0.ff.net.2", "output_blocks.3.1.transformer_blocks.0.attn2.to_q",
    "time_embed.0",
)  # fmt: skip
TE_MODULES = ("text_model.encoder.layers.0.self_attn.q_proj", "text_model.encoder.layers.1.mlp.fc1")
#: SD1's 17: BASE, IN01 IN02 IN04 IN05 IN07 IN08, M00, OUT03 ... OUT11
WEIGHTS = (0.5, 0.3, 1.0, 1.0, 1.0, 1.0, 1.0, -0.7, 0.25, 1.5, 0.0, 1, 1, 1, 1, 1, 1)


def _lora(path: Path) -> Path:
    unet, te = TINY_UNET_SD1.state(), checkpoint_tensors("sd1")
    g = torch.Generator().manual_seed(9)
    tensors = {}
    for prefix, modules, shapes in (
        ("lora_unet_", UNET_MODULES, lambda m: unet[m + ".weight"].shape),
        ("lora_te_", TE_MODULES, lambda m: te["cond_stage_model.transformer." + m + ".weight"].shape),
    ):
        for m in modules:
            out, inp = shapes(m)
            name = prefix + m.replace(".", "_")
            tensors[f"{name}.lora_down.weight"] = torch.randn(4, inp, generator=g) * 0.1
            tensors[f"{name}.lora_up.weight"] = torch.randn(out, 4, generator=g) * 0.1
            tensors[f"{name}.alpha"] = torch.tensor(2.0)
    return write_tensors(path, tensors)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("lbw")
    return write_tensors(folder / "sd1.safetensors", checkpoint_tensors("sd1")), _lora(
        folder / "lora.safetensors"
    )


def _states(bundle: ModelBundle) -> dict[str, dict[str, torch.Tensor]]:
    return {c.role: {k: v.clone() for k, v in c.module.state_dict().items()} for c in bundle.components}


def _baked(base: Path, lora: Path, model: float, clip: float) -> dict[str, dict[str, torch.Tensor]]:
    """The LoRA alone, baked at one strength everywhere (the reference for one block)."""
    bundle = load_checkpoint(base)
    stack = LoraStack(bundle.components)
    stack.add(lora, model, clip)
    stack.apply()
    return _states(bundle)


def _block_of(key: str) -> int | None:
    """The index of ``key``'s block in the 17-value layout (None: a left-out block or none)."""
    order = ["input_blocks.1.", "input_blocks.2.", "input_blocks.4.", "input_blocks.5.", "input_blocks.7.",
             "input_blocks.8.", "middle_block.", *(f"output_blocks.{i}." for i in range(3, 12))]  # fmt: skip
    return next((i + 1 for i, p in enumerate(order) if key.startswith(p)), None)


def test_each_block_equals_baking_it_at_its_strength(files: tuple[Path, Path]) -> None:
    base, lora = files
    bundle = load_checkpoint(base)
    stack = LoraStack(bundle.components)
    entry = stack.add(lora, 0.8, 0.6, block_weights=BlockWeights(WEIGHTS))
    assert len(entry.report.matched) == len(UNET_MODULES) + len(TE_MODULES) and not entry.report.unmatched
    stack.apply()
    got, original = _states(bundle), _states(load_checkpoint(base))
    references: dict[tuple[float, float], dict[str, dict[str, torch.Tensor]]] = {}
    checked = {"block": 0, "left_out": 0, "no_block": 0, "text": 0}
    for role, part in (("diffusion_model", "diffusion_model"), ("text_encoder", "text_encoder:clip-l")):
        state = got[role]
        for key in entry.keys[part]:
            if role == "diffusion_model":
                i = _block_of(key)
                if i is not None:
                    strength, kind = 0.8 * WEIGHTS[i], "block"
                elif key.startswith(("input_blocks.", "middle_block.", "output_blocks.")):
                    strength, kind = 0.0, "left_out"  # IN03, OUT00: blocks the 17 leave out get 0
                else:
                    strength, kind = 0.8, "no_block"  # time_embed: keeps the LoRA's strength
                pair = (strength, 0.6)
            else:
                pair, kind = (0.8, 0.6 * WEIGHTS[0]), "text"
            if pair not in references:
                references[pair] = _baked(base, lora, *pair)
            want = references[pair][role][key]
            assert torch.equal(state[key], want), (key, pair)
            if kind in ("left_out",) or pair[0 if role == "diffusion_model" else 1] == 0:
                assert torch.equal(state[key], original[role][key]), key
            checked[kind] += 1
    assert checked == {"block": 6, "left_out": 3, "no_block": 1, "text": 2}
    # a strength change keeps the block weights: every block follows at its share
    stack.set_strength(entry.id, model=0.4)
    stack.apply()
    key = "output_blocks.3.1.transformer_blocks.0.attn2.to_q.weight"
    assert torch.equal(bundle.diffusion_model.module.state_dict()[key], _baked(base, lora, 0.4 * 0.25, 0.6)[
        "diffusion_model"][key])  # fmt: skip


def test_presets_counts_and_families_are_checked(files: tuple[Path, Path], tmp_path: Path) -> None:
    base, lora = files
    stack = LoraStack(load_checkpoint(base).components)
    entry = stack.add(lora, 1.0, block_weights=BlockWeights(preset="INS"))  # BASE, IN01, IN02, IN04
    scales = stack.patchers["diffusion_model"].sets[0].scales
    assert scales["input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight"] == 1.0
    assert scales["middle_block.1.transformer_blocks.0.attn2.to_v.weight"] == 0.0
    assert stack.summary()[entry.id]["block_weights"] == "INS"
    every = tuple(float(i) for i in range(26))  # the 26: BASE, IN00-IN11, M00, OUT00-OUT11
    stack.add(lora, 1.0, block_weights=BlockWeights(every))
    scales = stack.patchers["diffusion_model"].sets[1].scales
    assert scales["output_blocks.2.1.transformer_blocks.0.attn1.to_out.0.weight"] == 16.0  # OUT02
    assert scales["input_blocks.3.0.emb_layers.1.weight"] == 4.0 and "time_embed.0.weight" not in scales
    assert stack.patchers["text_encoder:clip-l"].sets[1].scales == {
        k: 0.0 for k in stack.patchers["text_encoder:clip-l"].sets[1].patches
    }  # BASE
    with pytest.raises(LoadoutError, match=r"5 block weights were given for Stable Diffusion 1\.x") as e:
        stack.add(lora, 1.0, block_weights=BlockWeights((1, 0, 0, 0, 1)))
    assert "17 or 26 values" in e.value.message
    with pytest.raises(LoadoutError, match="no block-weight preset 'XYZ'"):
        stack.add(lora, 1.0, block_weights=BlockWeights(preset="XYZ"))
    flux = write_tensors(tmp_path / "flux.safetensors", checkpoint_tensors("flux-dev"))
    flux_stack = LoraStack(load_checkpoint(flux).components)
    with pytest.raises(LoadoutError, match=r"LoRA block weights are not defined for FLUX\.1 \[dev\]"):
        flux_stack.add(lora, 1.0, force=True, block_weights=BlockWeights(preset="ALL"))


def test_the_lora_argument_takes_block_weights() -> None:
    arg = parse_lora("style.safetensors:0.8:lbw=1,0,0.5")
    assert (arg.model, arg.clip, arg.block_weights) == (0.8, None, BlockWeights((1.0, 0.0, 0.5)))
    assert parse_lora("style.safetensors:lbw=outall").block_weights == BlockWeights(preset="OUTALL")
    with pytest.raises(LoadoutError, match="out of range"):
        parse_lora("style.safetensors:1:lbw=1,500")


def test_block_weights_are_written_in_the_lora_tag_and_read_back() -> None:
    """A1111's lora-block-weight tag: ``<lora:name:S:lbw=...>`` (also after two strengths)."""
    from core.generate.parameters import GenerationParameters, LoraUse, format_parameters, parse_parameters

    loras = (
        LoraUse("style", 0.8, 0.8, block_weights="1,0,0.5"),
        LoraUse("detail", 0.6, 0.4, block_weights="INS"),
    )
    text = format_parameters(GenerationParameters(prompt="a castle", loras=loras))
    assert text.startswith("a castle <lora:style:0.8:lbw=1,0,0.5> <lora:detail:0.4:0.6:lbw=INS>")
    back = parse_parameters(text)
    assert back.prompt == "a castle" and back.loras == loras
    assert parse_parameters("x <lora:a:1>\nSteps: 4").loras == (LoraUse("a", 1.0, 1.0),)
