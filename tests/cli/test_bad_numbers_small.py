"""Issue 35's smaller bad inputs, each refused in words with exit 2 before any work:
``--hires-scale nan``, ``--sweep ,`` and a LoRA with three strengths."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--hires-scale", "nan", "--hires-denoise", "0.5"], "the hires scale"),
        (["--sweep", ","], "has 0 values"),
        (["--lora", "{lora}:1:1:1"], "too many strengths"),
    ],
)
def test_small_bad_inputs_are_refused_in_words(
    tmp_path: Path, extra: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = tmp_path / "m.safetensors"
    lora = tmp_path / "l.safetensors"
    for p in (ckpt, lora):
        p.write_bytes(b"")
    args = [a.replace("{lora}", str(lora)) for a in extra]
    code = main(["generate", str(ckpt), "--prompt", "x", "-o", str(tmp_path / "o.png"), *args])
    err = capsys.readouterr().err
    assert code == 2 and said in err, err
    assert "does not exist" not in err and "internal error" not in err


def test_core_names_the_input_and_the_command_line_adds_its_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = tmp_path / "m.safetensors"
    ckpt.write_bytes(b"")
    assert (
        main(["generate", str(ckpt), "--prompt", "x", "--denoise", "0.5", "-o", str(tmp_path / "o.png")]) == 2
    )
    err = capsys.readouterr().err
    assert "needs a starting image" in err and "(on the command line: --init)" in err
