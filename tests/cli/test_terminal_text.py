"""One sanitiser for everything printed to a terminal (app/terminal.py): escape sequences, right-
to-left overrides and other control or format characters from a file are shown escaped, a line of
a megabyte is cut with its length; JSON output is unchanged."""

from __future__ import annotations

import json
import random
import unicodedata
from pathlib import Path

import pytest

from app.cli import main
from app.terminal import LINE_LIMIT, for_terminal
from tests.fixtures.layouts_lora import lora_layout, unet_attention_layers
from tests.fixtures.st_files import write_sparse

HOSTILE = "\x1b]0;owned\x07\x1b[8mhidden\x1b[0m \u202eevil\u202c \r\x00\x9b2J"


def _printed_safely(text: str) -> bool:
    return all(
        ch == "\n" or unicodedata.category(ch) not in ("Cc", "Cf", "Co", "Cs", "Zl", "Zp") for ch in text
    ) and all(len(line) <= LINE_LIMIT + 60 for line in text.split("\n"))


def test_fuzzed_strings_come_out_printable_cut_and_otherwise_unchanged() -> None:
    rng = random.Random(8)
    pool = [
        chr(c) for c in (*range(0, 0x20), 0x7F, *range(0x80, 0xA0), 0x200E, 0x202E, 0x2066, 0x2028, 0xFEFF)
    ]
    pool += list("abc xyz,./é漢😀\n")
    for _ in range(300):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 3000)))
        shown = for_terminal(text)
        assert _printed_safely(shown)
        assert shown.count("\n") == text.count("\n")
    plain = "ohwx person, smiling — 漢字 😀"
    assert for_terminal(plain) == plain
    long = "x" * 1_050_068
    assert for_terminal(long).endswith("(cut: the line has 1,050,068 characters)")


def _hostile_lora(tmp_path: Path) -> Path:
    layout = lora_layout(unet_attention_layers("sdxl", naming="original"), "kohya", rank=4)
    tags = {"10_x": {HOSTILE: 10, "y" * 1_050_068: 3}}
    return write_sparse(
        tmp_path / "lora.safetensors", layout, metadata={"ss_tag_frequency": json.dumps(tags)}
    )


def test_inspect_prints_hostile_trigger_words_escaped_and_json_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lora = _hostile_lora(tmp_path)
    assert main(["inspect", str(lora)]) == 0
    out = capsys.readouterr().out
    assert _printed_safely(out) and "\\x1b]0;owned" in out and "\\u202eevil" in out
    assert "(cut: the line has 1,05" in out
    assert main(["inspect", "--json", str(lora)]) == 0
    words = json.loads(capsys.readouterr().out)[0]["metadata"]["loadout.trigger_words"]
    assert HOSTILE in words  # data stays data


def test_error_messages_naming_a_hostile_file_name_are_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / f"{HOSTILE.replace(chr(0), '')}.safetensors"
    assert main(["check", str(missing)]) in (1, 2)
    captured = capsys.readouterr()
    assert _printed_safely(captured.out + captured.err)
    assert main(["merge", str(missing), "--lora", str(missing), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert _printed_safely(err) and "\\x1b" in err
