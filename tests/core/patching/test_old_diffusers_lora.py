"""LoRAs saved with diffusers' attention-processor names (diffusers 0.12-0.21, before PEFT) are applied.

``LoRAAttnProcessor`` held ``to_q_lora`` / ``to_k_lora`` / ``to_v_lora`` / ``to_out_lora`` (each with
``down`` and ``up``), saved as ``unet.<attention>.processor.to_q_lora.down.weight``; the text encoders
as ``text_encoder(_2).text_model.encoder.layers.N.self_attn.to_q_lora.down.weight``. Later writers kept
``processor.`` with PEFT factors (``processor.to_q.lora_A.weight``). diffusers' own converter
(``convert_unet_state_dict_to_peft`` / ``convert_state_dict_to_peft``) is the reference for what each
name means; PEFT's patched diffusers UNet is the reference for the result. No alpha is stored in these
files (the scale is 1); a ``<module>.alpha`` beside the factors, where ComfyUI looks for one, is honoured.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from core.loading.loader import LoadedComponent, load_checkpoint
from core.patching.lora_stack import LoraStack
from tests.fixtures.st_files import write_tensors
from tests.fixtures.tiny_models import checkpoint_tensors

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("peft")
from diffusers.utils.state_dict_utils import (  # noqa: E402
    StateDictType,
    convert_state_dict_to_peft,
    convert_unet_state_dict_to_peft,
)

Tensors = dict[str, torch.Tensor]
RANK = 4

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: as fast, spins against nothing


# --- naming: PEFT names -> the old names ----------------------------------------------------------

_SHORT = {"to_q": "to_q", "to_k": "to_k", "to_v": "to_v", "to_out.0": "to_out"}


def _split_peft(key: str) -> tuple[str, str, str]:
    """``base_model.model.<attention>.to_out.0.lora_A.weight`` -> (attention, "to_out.0", "A")."""
    path = key.removeprefix("base_model.model.").removesuffix(".weight")
    module, _, factor = path.rpartition(".lora_")
    for proj in _SHORT:
        if module.endswith("." + proj):
            return module[: -len(proj) - 1], proj, factor
    raise AssertionError(key)


def _processor_lora(attention: str, proj: str, factor: str) -> str:
    return f"{attention}.processor.{_SHORT[proj]}_lora.{'down' if factor == 'A' else 'up'}.weight"


def _processor_lora_a(attention: str, proj: str, factor: str) -> str:
    return f"{attention}.processor.{_SHORT[proj]}.lora_{factor}.weight"


NAMINGS: dict[str, tuple[str, Callable[[str, str, str], str]]] = {
    # (prefix, name of one factor)
    "unet.processor.to_q_lora": ("unet.", _processor_lora),
    "unet.processor.to_q.lora_A": ("unet.", _processor_lora_a),
    "processor.to_q_lora (no prefix)": ("", _processor_lora),  # ComfyUI reads these bare too
}


def _old_names(peft_state: Tensors, naming: str, alpha: float | None, scale: float) -> Tensors:
    """The PEFT LoRA under old diffusers names: ``alpha`` keys beside the factors, or (None) the
    PEFT scale folded into ``up`` as a file without alphas must."""
    prefix, name = NAMINGS[naming]
    out: Tensors = {}
    for key, value in peft_state.items():
        attention, proj, factor = _split_peft(key)
        t = value.clone()
        if factor == "B" and alpha is None:
            t = t * scale
        out[prefix + name(attention, proj, factor)] = t
        if alpha is not None:
            out[f"{prefix}{attention}.processor.{_SHORT[proj]}.alpha"] = torch.tensor(alpha)
    return out


def _attention_case(name: str) -> object:
    """A tiny diffusers UNet case of keymap_peft with LoRA on the attention projections only: all
    that the attention processors carried."""
    from tests.fixtures.keymap_peft import CASES

    return replace(CASES[name], targets=tuple(_SHORT))


def test_old_names_are_what_diffusers_reads_as_these_peft_factors() -> None:
    """diffusers' converter takes our old-name file back to PEFT's own names and tensors."""
    from tests.fixtures.keymap_peft import peft_unet

    ref = peft_unet(_attention_case("sd1-like"))  # type: ignore[arg-type]
    old = _old_names(ref.lora_state, "unet.processor.to_q_lora", None, 1.0)
    back = convert_unet_state_dict_to_peft(old)
    want = {"unet." + k.removeprefix("base_model.model."): v for k, v in ref.lora_state.items()}
    assert back.keys() == want.keys()
    assert all(torch.equal(back[k], want[k]) for k in want)
    assert any(".processor.to_out_lora.up.weight" in k for k in old)


@pytest.mark.parametrize("alpha", [None, 8.0], ids=["no-alpha", "alpha-key"])
@pytest.mark.parametrize("naming", list(NAMINGS))
@pytest.mark.parametrize("case", ["sd1-like", "sdxl-like"])
def test_old_diffusers_lora_on_our_unet_matches_peft(
    tmp_path: Path, case: str, naming: str, alpha: float | None
) -> None:
    """Every targeted weight changes by exactly its module's delta, nothing else changes, and our UNet
    then gives the output of PEFT's patched diffusers UNet."""
    from core.loading.convert.unet_diffusers import unet_diffusers_to_original, unet_original_key_map
    from core.models.unet import UNetModel
    from tests.fixtures.keymap_peft import ALPHA, PeftCase, inputs, peft_unet

    c = _attention_case(case)
    assert isinstance(c, PeftCase)
    ref = peft_unet(c)
    scale = ALPHA / RANK
    old = _old_names(ref.lora_state, naming, alpha if alpha is None else float(ALPHA), scale)
    path = write_tensors(tmp_path / "old-diffusers.safetensors", old)

    ours = UNetModel(c.config).eval()
    ours.load_state_dict(unet_diffusers_to_original(ref.base_state, c.config), strict=True)
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    family = "sd1" if case == "sd1-like" else "sdxl"
    comp = LoadedComponent("diffusion_model", family, "", "original", ours, c.config, None)  # type: ignore[arg-type]
    stack = LoraStack([comp])
    entry = stack.add(path, force=True)  # tiny widths: the family guess is not the point here
    modules = len(ref.lora_state) // 2
    assert entry.report.counts == {
        "total": modules,
        "matched": modules,
        "unmatched": 0,
        "shape_mismatches": 0,
    }
    assert entry.skipped == []
    assert {m.format for m in entry.analysis.modules} == {
        "diffusers" if naming.startswith("unet") else "bare"
    }
    stack.apply()

    # the expected change of each weight, from PEFT's factors and diffusers' key names
    to_original = unet_original_key_map(c.config)
    expected: dict[str, torch.Tensor] = {}
    for key, down in ref.lora_state.items():
        if ".lora_A." not in key:
            continue
        up = ref.lora_state[key.replace(".lora_A.", ".lora_B.")]
        attention, proj, _ = _split_peft(key)
        target = to_original[f"{attention}.{proj}.weight"]
        w = before[target]
        expected[target] = (scale * (up.flatten(1) @ down.flatten(1))).reshape(w.shape)
    assert len(expected) == modules
    after = ours.state_dict()
    for key, w0 in before.items():
        if key in expected:
            torch.testing.assert_close(after[key] - w0, expected[key], rtol=1e-5, atol=1e-6)
            assert not torch.equal(after[key], w0), key
        else:
            assert torch.equal(after[key], w0), key  # bit for bit untouched

    args, extra, y = inputs(c.config)
    want = ref(*args[:2], encoder_hidden_states=args[2], **extra)
    with torch.no_grad():
        got = ours(*args, y)
    err = float((got - want).abs().max()) / float(want.abs().max())
    assert err < 1e-4


# --- a whole SDXL checkpoint: UNet and both text encoders, old names ------------------------------

_TE_SHORT = {"q_proj": "to_q", "k_proj": "to_k", "v_proj": "to_v", "out_proj": "to_out"}


def _te_old_file(
    bundle_te: LoadedComponent, prefix: str, g: torch.Generator
) -> tuple[Tensors, dict[str, str]]:
    """Old-name factors for every CLIP attention projection: file tensors, module -> target key."""
    tensors: Tensors = {}
    targets: dict[str, str] = {}
    for key, w in bundle_te.module.state_dict().items():
        head, _, last = key.removesuffix(".weight").rpartition(".")
        if not key.endswith(".weight") or last not in _TE_SHORT or not head.endswith("self_attn"):
            continue
        name = f"{prefix}{head}.{_TE_SHORT[last]}_lora"
        tensors[f"{name}.down.weight"] = torch.randn(RANK, w.shape[1], generator=g) * 0.1
        tensors[f"{name}.up.weight"] = torch.randn(w.shape[0], RANK, generator=g) * 0.1
        targets[f"{prefix}{head}.{_TE_SHORT[last]}"] = key
    return tensors, targets


def _unet_old_file(bundle: object, g: torch.Generator) -> tuple[Tensors, dict[str, str]]:
    from core.loading.convert.unet_diffusers import unet_original_key_map

    unet = bundle.diffusion_model  # type: ignore[attr-defined]
    shapes = {k: v.shape for k, v in unet.module.state_dict().items()}
    tensors: Tensors = {}
    targets: dict[str, str] = {}
    for diff_key, original in unet_original_key_map(unet.config).items():
        path = diff_key.removesuffix(".weight")
        for proj, short in _SHORT.items():
            if diff_key.endswith(".weight") and ".attn" in path and path.endswith("." + proj):
                attention = path[: -len(proj) - 1]
                out, inp = shapes[original][:2]
                name = f"unet.{attention}.processor.{short}_lora"
                tensors[f"{name}.down.weight"] = torch.randn(RANK, inp, generator=g) * 0.1
                tensors[f"{name}.up.weight"] = torch.randn(out, RANK, generator=g) * 0.1
                targets[f"unet.{attention}.processor.{short}"] = original
    return tensors, targets


def test_old_diffusers_sdxl_lora_changes_unet_and_both_text_encoders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = write_tensors(tmp_path / "tiny-sdxl.safetensors", checkpoint_tensors("sdxl"))
    bundle = load_checkpoint(ckpt)
    clip_l, clip_g = bundle.text_encoders
    g = torch.Generator().manual_seed(3)
    unet_t, unet_targets = _unet_old_file(bundle, g)
    te1_t, te1_targets = _te_old_file(clip_l, "text_encoder.", g)
    te2_t, te2_targets = _te_old_file(clip_g, "text_encoder_2.", g)
    tensors = unet_t | te1_t | te2_t
    # diffusers reads the text-encoder names as these projections
    te_peft = convert_state_dict_to_peft(te1_t | te2_t, original_type=StateDictType.DIFFUSERS_OLD)
    assert all(".self_attn." in k and "_proj.lora_" in k for k in te_peft)
    lora = write_tensors(tmp_path / "old-sdxl.safetensors", tensors)

    comps = {"diffusion_model": bundle.diffusion_model, "clip-l": clip_l, "clip-g": clip_g}
    before = {n: {k: v.clone() for k, v in c.module.state_dict().items()} for n, c in comps.items()}
    stack = LoraStack(bundle.components)
    entry = stack.add(lora, model_strength=0.7, clip_strength=-1.2)
    n_modules = len(tensors) // 2
    assert entry.report.counts["matched"] == n_modules and entry.report.unmatched == []
    assert entry.analysis.summary.targets == {
        "diffusion_model": len(unet_targets),
        "text_encoder": len(te1_targets) + len(te2_targets),
    }
    assert entry.base_family == "sdxl"
    stack.apply()

    plan = {
        "diffusion_model": (unet_targets, 0.7),
        "clip-l": (te1_targets, -1.2),
        "clip-g": (te2_targets, -1.2),
    }
    for comp_name, (targets, strength) in plan.items():
        after = comps[comp_name].module.state_dict()
        changed = {}
        for module, key in targets.items():
            name = module + "_lora"
            up, down = tensors[f"{name}.up.weight"], tensors[f"{name}.down.weight"]
            w0 = before[comp_name][key]
            changed[key] = (strength * (up @ down)).reshape(w0.shape).to(w0.dtype)
        for key, w0 in before[comp_name].items():
            if key in changed:
                torch.testing.assert_close(after[key] - w0, changed[key], rtol=1e-5, atol=1e-6)
            else:
                assert torch.equal(after[key], w0), (comp_name, key)
        assert len(changed) == len(targets) > 0

    # the merge dry run lists every module as matched
    from app.cli import main as cli_main

    capsys.readouterr()
    assert cli_main(["merge", str(ckpt), "--lora", str(lora), "--dry-run", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (row,) = report["loras"]
    assert (row["format"], row["modules"], row["matched"]) == ("diffusers", n_modules, n_modules)
    assert row["unmatched"] == [] and row["shape_mismatches"] == []


# --- names alone ----------------------------------------------------------------------------------

ATTN = "down_blocks.1.attentions.0.transformer_blocks.0.attn2"
CLIP_ATTN = "text_model.encoder.layers.3.self_attn"


@pytest.mark.parametrize(
    ("key", "role", "path"),
    [
        (f"unet.{ATTN}.processor.to_q_lora.down.weight", "diffusion_model", f"{ATTN}.to_q"),
        (f"unet.{ATTN}.processor.to_out_lora.up.weight", "diffusion_model", f"{ATTN}.to_out.0"),
        (f"unet.{ATTN}.processor.to_k.lora_A.weight", "diffusion_model", f"{ATTN}.to_k"),
        (f"unet.{ATTN}.processor.to_out.lora_B.weight", "diffusion_model", f"{ATTN}.to_out.0"),
        (f"unet.{ATTN}.processor.to_out.0.lora_A.weight", "diffusion_model", f"{ATTN}.to_out.0"),
        (f"unet.{ATTN}.processor.to_v.lora.down.weight", "diffusion_model", f"{ATTN}.to_v"),
        (f"{ATTN}.processor.to_v_lora.down.weight", "diffusion_model", f"{ATTN}.to_v"),
        (f"text_encoder.{CLIP_ATTN}.to_q_lora.down.weight", "text_encoder", f"{CLIP_ATTN}.q_proj"),
        (f"text_encoder_2.{CLIP_ATTN}.to_out_lora.up.weight", "text_encoder", f"{CLIP_ATTN}.out_proj"),
        (f"text_encoder.{CLIP_ATTN}.processor.to_k_lora.up.weight", "text_encoder", f"{CLIP_ATTN}.k_proj"),
        (f"text_encoder.{CLIP_ATTN}.to_v.lora_A.weight", "text_encoder", f"{CLIP_ATTN}.v_proj"),
        # names that are not the old form keep their path
        (f"unet.{ATTN}.to_out.0.lora_A.weight", "diffusion_model", f"{ATTN}.to_out.0"),
        (f"text_encoder.{CLIP_ATTN}.q_proj.lora_A.weight", "text_encoder", f"{CLIP_ATTN}.q_proj"),
        ("transformer.transformer_blocks.0.attn.to_out.0.lora_A.weight", "diffusion_model",
         "transformer_blocks.0.attn.to_out.0"),
    ],
)  # fmt: skip
def test_old_diffusers_names_become_module_paths(key: str, role: str, path: str) -> None:
    from core.detect.lora_keys import naming_scheme, split_key

    part = split_key(key)
    assert part is not None and part.part in ("down", "up")
    scheme = naming_scheme(part.module, frozenset({part.spelling} - {None}))
    assert (scheme.role, scheme.path) == (role, path)


def test_alpha_beside_old_factors_belongs_to_their_module() -> None:
    from core.detect.lora_keys import split_key

    down = split_key(f"unet.{ATTN}.processor.to_q_lora.down.weight")
    alpha = split_key(f"unet.{ATTN}.processor.to_q.alpha")
    assert down is not None and alpha is not None
    assert (down.module, alpha.module, alpha.part) == (f"unet.{ATTN}.processor.to_q",) * 2 + ("alpha",)
