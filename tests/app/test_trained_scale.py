"""The window tells the artist a LoRA's trained scale (alpha / r from its metadata only): the LoRA
card says it and offers "Use trained strength", the Details pane says it for the file."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.backend.messages import LoraInfo, StackInfo
from app.gui.details import entry_html
from app.gui.lora_panel import LoraStackPanel
from app.gui.stack_model import StackModel
from app.lora_words import trained_strengths
from core.detect.types import LoraSummary, TrainedScale
from core.library.entry import Entry

UNET = TrainedScale(component="unet", alpha=64.0, rank=16, scale=4.0)
TE = TrainedScale(component="text_encoder", alpha=8.0, rank=4, scale=2.0)
SENTENCE = (
    "trained at alpha 64 / rank 16 (x4.0): ComfyUI and Loadout apply it at x1 — "
    "set strength 4.0 for the trained effect"
)


class FakeBackend(QObject):
    stack_changed = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self.baked: list[tuple[str, float, float]] = []

    def bake_strength(self, lora_id: str, model: float, clip: float) -> None:
        self.baked.append((lora_id, model, clip))

    def preview_strength(self, lora_id: str, model: float, clip: float) -> None:  # pragma: no cover
        pass


def _info(scales: tuple[TrainedScale, ...], targets: tuple[str, ...] = ("diffusion_model",)) -> LoraInfo:
    return LoraInfo(
        id="style", path=Path("/loras/style.safetensors"), base_family="flux-1-dev", model_strength=1.0,
        clip_strength=1.0, enabled=True, matched=10, unmatched=0, skipped=0, shape_mismatches=0,
        format="diffusers", targets=targets, trained_scale=scales,
    )  # fmt: skip


def test_the_lora_card_says_the_trained_scale_and_uses_it(qtbot) -> None:
    backend = FakeBackend()
    panel = LoraStackPanel(StackModel(backend))  # type: ignore[arg-type]
    qtbot.addWidget(panel)
    panel.show_stack(StackInfo("flux-1-dev", (_info((UNET,)),)))
    card = panel.cards["style"]
    assert card.trained.text() == "ⓘ " + SENTENCE
    assert not card.trained.isHidden() and "ComfyUI ignores it" in card.trained.toolTip()
    menu = card.context_menu()
    assert menu is not None
    (action,) = menu.actions()
    assert action.text() == "Use trained strength"
    action.trigger()
    menu.close()
    assert backend.baked == [("style", 4.0, 1.0)]  # the text encoder is not patched: left alone
    assert card.model.value() == 4.0 and card.model.spin.maximum() >= 4.0


def test_a_card_without_a_trained_scale_says_nothing(qtbot) -> None:
    backend = FakeBackend()
    panel = LoraStackPanel(StackModel(backend))  # type: ignore[arg-type]
    qtbot.addWidget(panel)
    panel.show_stack(StackInfo("sdxl", (_info(()),)))
    card = panel.cards["style"]
    assert card.trained.isHidden() and card.trained.text() == ""
    assert card.context_menu() is None  # no menu with nothing to do
    card.use_trained_strength()
    assert backend.baked == []


def test_both_strengths_when_both_components_were_trained_off_one(qtbot) -> None:
    backend = FakeBackend()
    panel = LoraStackPanel(StackModel(backend))  # type: ignore[arg-type]
    qtbot.addWidget(panel)
    panel.show_stack(StackInfo("sd1", (_info((TE, UNET), ("diffusion_model", "text_encoder:clip-l")),)))
    card = panel.cards["style"]
    assert "text_encoder: trained at alpha 8 / rank 4 (x2.0)" in card.trained.text()
    assert (
        "set text-encoder strength 2.0" in card.trained.text() and "unet: trained at" in card.trained.text()
    )
    card.use_trained_strength()
    assert backend.baked[-1] == ("style", 4.0, 2.0)
    assert trained_strengths((TE, UNET)) == (4.0, 2.0)


def test_the_details_pane_says_it_for_a_lora_file() -> None:
    summary = LoraSummary(
        format="diffusers", algorithms=("lora",), rank=16, modules=10,
        targets={"diffusion_model": 10, "text_encoder": 0}, trained_scale=(UNET,),
    )  # fmt: skip
    entry = Entry(
        path=Path("/loras/style.safetensors"), origin="loras", root=Path("/loras"), folder="",
        kind_hint="loras", size=1000, mtime_ns=0, status="ok", kind="lora", lora=summary,
    )  # fmt: skip
    html = entry_html(entry)
    assert "Trained scale" in html and SENTENCE in html
    plain = Entry(
        path=Path("/loras/plain.safetensors"), origin="loras", root=Path("/loras"), folder="",
        kind_hint="loras", size=1000, mtime_ns=0, status="ok", kind="lora",
        lora=LoraSummary(format="kohya", algorithms=("lora",), rank=16, modules=10, targets={}),
    )  # fmt: skip
    assert "Trained scale" not in entry_html(plain)
