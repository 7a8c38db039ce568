"""A LoRA on the negative prompt only on a simulated card: the placed copies are refreshed between
the two prompts' calls and streamed layers read the strength at their cast, so each call computes
with its own weights bit for bit (the positive's first, without the LoRA); the CLI's
``--lora FILE:S:on=negative`` and its refusal of an unknown prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.demo import DemoLibrary
from core.generate.png import read_png_parameters
from tests.core.generate.lora_on_prompt_case import check_calls, cpu_weights, generate_recording, session_with
from tests.fixtures.demo_copy import DemoAt


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, demo_library_at: DemoAt) -> DemoLibrary:
    return demo_library_at(tmp_path_factory.mktemp("demo"))


def test_a_cards_calls_run_each_prompts_weights(demo: DemoLibrary, tmp_path: Path) -> None:
    session = session_with(demo, "negative", card=True)
    _, calls = generate_recording(session, tmp_path / "n.png")
    check_calls(session, calls, "negative", cpu_weights(session_with(demo, None)))


def test_the_cli_takes_a_lora_on_one_prompt(
    demo: DemoLibrary, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli import main

    base = ["generate", str(demo.checkpoint), "--prompt", "a fox", "--negative", "blur", "--seed", "3",
            "--steps", "1", "--size", "64x64"]  # fmt: skip
    assert main([*base, "--lora", f"{demo.lora}:0.5:on=negative", "-o", str(tmp_path / "c.png")]) == 0
    assert f"<lora:{demo.lora.stem}:0.5:on=negative>" in read_png_parameters(tmp_path / "c.png")
    capsys.readouterr()
    assert main([*base, "--lora", f"{demo.lora}:0.5:on=sideways", "-o", str(tmp_path / "b.png")]) == 2
    err = capsys.readouterr().err
    assert "on=positive, on=negative or on=region1" in err and "Traceback" not in err
    assert not (tmp_path / "b.png").exists()
