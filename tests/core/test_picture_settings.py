"""Use a picture's settings (core.generate.picture_settings): the picture's model and LoRAs matched
with the loaded model, the stack and the library, read from real A1111 parameter text."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from core.generate.parameters import parse_parameters
from core.generate.picture_settings import PicturePlan, plan_picture_settings
from core.library import Entry
from core.session.loras import LoraOptions
from core.session.snapshots import LoraInfo

TEXT = (
    "a fox <lora:add_detail:0.6> <lora:Inkwash:0.8:0.5>\n"
    "Negative prompt: blurry\n"
    "Steps: 20, Sampler: Euler, CFG scale: 7, Seed: 5, Size: 512x512, Model: dreamy-sd15"
)
ROOT = Path("/models")


def entry(rel: str, kind: str) -> Entry:
    path = ROOT / rel
    return Entry(path, "folder", ROOT, "", None, 1, 0, status="ok", kind=kind, family="sd1")


LIBRARY = [
    entry("checkpoints/dreamy-sd15.safetensors", "checkpoint"),
    entry("checkpoints/other.safetensors", "checkpoint"),
    entry("loras/add_detail.safetensors", "lora"),
    entry("loras/inkwash.safetensors", "lora"),
]


def on_stack(rel: str, lora_id: str, strength: float, enabled: bool = True) -> LoraInfo:
    return LoraInfo(
        id=lora_id, path=ROOT / rel, base_family="sd1", model_strength=strength, clip_strength=strength,
        enabled=enabled, matched=1, unmatched=0, skipped=0, shape_mismatches=0,
    )  # fmt: skip


def test_with_no_model_loaded_the_pictures_model_is_offered_and_its_loras_are_found() -> None:
    """Issue 30: with no model loaded the picture's LoRA was called "not in your library" (it
    was) and its checkpoint (also in the library) was not offered."""
    plan = plan_picture_settings(parse_parameters(TEXT), None, [], LIBRARY)
    assert plan.load == ROOT / "checkpoints/dreamy-sd15.safetensors" and plan.model_missing == ""
    assert plan.add == ((ROOT / "loras/add_detail.safetensors", 0.6, 0.6),
                        (ROOT / "loras/inkwash.safetensors", 0.5, 0.8))  # fmt: skip
    assert plan.missing == ()


def test_the_stack_is_made_what_the_picture_used() -> None:
    stack = [
        on_stack("loras/add_detail.safetensors", "a", 1.0, enabled=False),
        on_stack("loras/style.safetensors", "s", 1.0),
    ]
    loaded = ROOT / "checkpoints/dreamy-sd15.safetensors"
    plan = plan_picture_settings(parse_parameters(TEXT), loaded, stack, LIBRARY)
    assert plan.load is None  # the picture's model is the loaded one
    assert plan.enable == ("a",) and plan.disable == ("s",) and plan.strengths == (("a", 0.6, 0.6),)
    assert plan.add == ((ROOT / "loras/inkwash.safetensors", 0.5, 0.8),)


def test_names_nowhere_to_be_found_are_listed() -> None:
    text = TEXT.replace("Model: dreamy-sd15", "Model: juggernaut").replace("Inkwash", "unknown_style")
    plan = plan_picture_settings(parse_parameters(text), None, [], LIBRARY)
    assert plan == PicturePlan(
        model_missing="juggernaut", add=((ROOT / "loras/add_detail.safetensors", 0.6, 0.6),),
        missing=("unknown_style",),
    )  # fmt: skip


def test_block_weights_and_prompt_targets_come_with_the_loras() -> None:
    """A tag's ``lbw=`` and ``on=`` become the LoRA's options: set on a stack LoRA whose options
    differ (and cleared where the picture has none), given to an added one, left alone when equal."""
    text = TEXT.replace("<lora:add_detail:0.6>", "<lora:add_detail:0.6:lbw=OUTD:on=negative>").replace(
        "<lora:Inkwash:0.8:0.5>", "<lora:Inkwash:0.8:0.5:lbw=INS>"
    )
    loaded = ROOT / "checkpoints/dreamy-sd15.safetensors"
    style = replace(on_stack("loras/style.safetensors", "style", 1.0), block_weights="INS", on="positive")
    plan = plan_picture_settings(
        parse_parameters(text.replace("a fox", "a fox <lora:style:1>")), loaded, [style], LIBRARY
    )
    assert plan.options == (
        LoraOptions("style"),
        LoraOptions("add_detail", "OUTD", "negative"),
        LoraOptions("inkwash", "INS"),
    )
    same = replace(style, block_weights="", on=None)
    plan = plan_picture_settings(
        parse_parameters(text.replace("a fox", "a fox <lora:style:1>")), loaded, [same], LIBRARY
    )
    assert [o.name for o in plan.options] == ["add_detail", "inkwash"]
    assert plan.stack_change().options == plan.options
