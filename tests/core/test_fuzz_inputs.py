"""Property tests, one per input class (numbers, paths, picture text, safetensors metadata): seeded
random inputs, a few thousand each, in seconds. For every input: either accepted with a value in
its range, or refused with a LoadoutError that says why; never another exception, never a
half-written file. (Seeded loops rather than hypothesis: no new test dependency.)"""

from __future__ import annotations

import json
import math
import os
import random
import struct
import zlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from app.commands.args import BYTES, parse_bytes, parse_lora, parse_size
from core.detect.metadata import summarize_metadata
from core.errors import LoadoutError
from core.files.atomic import atomic_write_bytes, is_partial
from core.files.destination import check_output_file
from core.files.png_text import read_picture_header
from core.generate.parameters import parse_parameters
from core.generate.png import png_bytes, read_png_parameters
from core.patching.schedule import format_schedules, parse_schedule, read_schedules
from core.text.prompt import parse_weights
from core.values import (
    BATCH,
    CFG,
    DENOISE,
    GUIDANCE,
    LORA_STRENGTH,
    METADATA_COUNT,
    PROMPT_WEIGHT,
    SEED,
    SIDE,
    STEPS,
    VRAM_LIMIT,
    NumberRange,
)

RANGES = (
    SEED,
    STEPS,
    CFG,
    GUIDANCE,
    DENOISE,
    LORA_STRENGTH,
    PROMPT_WEIGHT,
    SIDE,
    BATCH,
    VRAM_LIMIT,
    METADATA_COUNT,
)
SPECIAL = ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e400", "-1e400", "1e308", "1e-400", "0", "-0",
           "-1", "99999999999999999999", "9" * 80, "0x10", "1_000", " 7 ", "", " ", "1e", "--1", "+5", "٣",
           "1.5", "2.0", "1e3", "\0", "1,5", "12abc", "true"]  # fmt: skip


def _number_texts(rng: random.Random, n: int) -> list[str]:
    out = list(SPECIAL)
    for _ in range(n):
        kind = rng.randrange(5)
        if kind == 0:
            out.append(repr(rng.uniform(-1e6, 1e6)))
        elif kind == 1:
            out.append(f"{rng.uniform(-10, 10):.3g}e{rng.randrange(-400, 400)}")
        elif kind == 2:
            out.append(str(rng.randrange(-(1 << 70), 1 << 70)))
        elif kind == 3:
            out.append(str(rng.randrange(-5, 20000)))
        else:
            out.append("".join(rng.choice("0123456789.eE+-xinfa _") for _ in range(rng.randrange(1, 12))))
    return out


def _in_range(r: NumberRange, v: float) -> bool:
    low = v > r.lo if r.lo_open else v >= r.lo
    return math.isfinite(v) and low and v <= r.hi and (not r.integer or float(v).is_integer())


def test_numbers_are_in_range_or_refused_with_the_range() -> None:
    rng = random.Random(19)
    for text in _number_texts(rng, 1500):
        for r in RANGES:
            try:
                v = r.parse(text)
            except LoadoutError as exc:
                assert r.describe() in exc.message, (r.name, text, exc.message)
                continue
            assert _in_range(r, v), (r.name, text, v)
        try:
            b = parse_bytes(text + rng.choice(["", "GiB", "mb", "k", "TiB", "x"]), BYTES)
        except LoadoutError:
            pass
        else:
            assert 0 <= b <= BYTES.hi
        try:
            lora = parse_lora(f"f.safetensors:{text}")
        except LoadoutError:
            pass
        else:
            assert _in_range(LORA_STRENGTH, lora.model)
        try:
            w, h = parse_size(f"{text}x{rng.choice([*SPECIAL[:8], '512', '64'])}")
        except LoadoutError:
            pass
        else:
            assert w % 8 == 0 and h % 8 == 0 and w * h <= 4096 * 4096


def test_prompt_weights_are_finite_and_in_range_or_refused() -> None:
    rng = random.Random(8)
    pieces = ["(", ")", "\\(", "\\)", "a", "cat", ":", " ", ",", "[", "]", *_number_texts(rng, 60)]
    for i in range(2000):
        prompt = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 40)))
        if i % 50 == 0:
            prompt = "(" * rng.randrange(1, 400) + "x" + ")" * 400  # nested far past 1.1^n overflow
        try:
            segments = parse_weights(prompt)
        except LoadoutError:
            continue
        for s in segments:
            assert _in_range(PROMPT_WEIGHT, s.weight), (prompt, s)


def test_lora_schedules_are_in_range_or_refused_and_read_back() -> None:
    rng = random.Random(31)
    pieces = ["style", "=", "@", ",", ";", ":", " ", "0", "1", "0.5", *_number_texts(rng, 80)]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 14)))
        for read in (parse_schedule, read_schedules):
            try:
                got = read(text)
            except LoadoutError:
                continue
            schedules = got if isinstance(got, tuple) else (got,)
            for s in schedules:
                assert s.lora and s.keyframes
                for k in s.keyframes:
                    assert math.isfinite(k.strength) and -20 <= k.strength <= 20 and 0 <= k.start <= 1
                    assert k.guarantee_steps >= 0
            if schedules and all(":" not in s.lora and ";" not in s.lora for s in schedules):
                assert read_schedules(format_schedules(schedules)) == schedules


def test_paths_are_checked_and_writes_are_whole_or_absent(tmp_path: Path) -> None:
    rng = random.Random(21)
    (tmp_path / "file").write_bytes(b"x")
    (tmp_path / "dir").mkdir()
    names = ["a.png", "file", "dir", "file/x.png", "dir/", "ü n i.png", "x" * 300, "." * 3, "-",
             "new/deep/o.png", "\u202e.png", "a\nb.png"]  # fmt: skip
    roots = [str(tmp_path), "/proc", "/sys/x", "/dev", "/nonexistent-root-dir", str(tmp_path / "file")]
    for _ in range(400):
        path = os.path.join(rng.choice(roots), rng.choice(names))
        data = os.urandom(rng.randrange(0, 5000))
        try:
            out = check_output_file(path)
            atomic_write_bytes(out, data)
        except LoadoutError:
            continue
        assert Path(path).read_bytes() == data  # accepted: the whole file
    leftovers = [p for p in tmp_path.rglob("*") if is_partial(p.name)]
    assert leftovers == []


def _png(text: str) -> bytes:
    import numpy as np

    return png_bytes(np.zeros((8, 8, 3), dtype=np.uint8), text)


def test_picture_text_is_read_or_refused_and_values_are_in_range(tmp_path: Path) -> None:
    rng = random.Random(6)
    keys = ["Steps", "CFG scale", "Seed", "Size", "Denoising strength", "Distilled CFG Scale", "Sampler"]
    values = [*_number_texts(rng, 80), "512x512", "99999x99999", "8x8", "1e400x64", "Euler a"]
    base = _png("a\nSteps: 20, Seed: 1")
    for i in range(600):
        items = ", ".join(f"{rng.choice(keys)}: {rng.choice(values)}" for _ in range(rng.randrange(1, 8)))
        text = f"p <lora:x:{rng.choice(values)}>\nSteps: {rng.choice(values)}, {items}"
        if i % 3 == 0:  # a damaged file: bytes flipped, cut or chunks claiming any length
            data = bytearray(base)
            for _ in range(rng.randrange(1, 6)):
                data[rng.randrange(8, len(data))] = rng.randrange(256)
            if rng.random() < 0.3:
                data = data[: rng.randrange(8, len(data))]
            if rng.random() < 0.3:
                data[8:12] = struct.pack(">I", rng.choice([0, 13, 2**31 - 1, 2**32 - 1]))
        else:
            data = bytearray(_png(text))
        path = tmp_path / "p.png"
        path.write_bytes(bytes(data))
        try:
            read_picture_header(path)
            p = parse_parameters(read_png_parameters(path))
        except LoadoutError:
            continue
        for r, v in ((STEPS, p.steps), (CFG, p.cfg), (SEED, p.seed), (SIDE, p.width), (SIDE, p.height)):
            assert _in_range(r, v), (text, r.name, v)
        assert p.denoise is None or _in_range(DENOISE, p.denoise)
        assert p.guidance is None or _in_range(GUIDANCE, p.guidance)
        assert all(_in_range(LORA_STRENGTH, lo.model_strength) for lo in p.loras)


def _metadata(rng: random.Random) -> dict[str, str]:
    weird = ["inf", "-inf", "nan", "1e999", "-3", "12", "1.5", "", "None", "x", "9" * 40, "[]", "{}", "null",
             json.dumps({"a": {"img_count": 1e308 * 10}}), '{"a": {"img_count": NaN}}',
             json.dumps({"d": {"tag": 1e999}}).replace("Infinity", "1e999"), '{"d": {"t": -Infinity}}',
             '[{"tag_frequency": {"d": {"t": 1e999}}}]', "[" * 5000 + "]" * 5000]  # fmt: skip
    keys = ["ss_network_dim", "ss_epoch", "ss_steps", "ss_num_epochs", "ss_max_train_steps",
            "ss_num_train_images", "ss_network_alpha", "ss_dataset_dirs", "ss_tag_frequency", "ss_datasets",
            "ss_network_args", "modelspec.thumbnail", "ss_v2", "modelspec.trigger_phrase"]  # fmt: skip
    return {rng.choice(keys): rng.choice(weird) for _ in range(rng.randrange(1, 8))}


def test_safetensors_metadata_never_breaks_a_summary() -> None:
    rng = random.Random(1)
    for _ in range(3000):
        md = _metadata(rng)
        s = summarize_metadata(md)
        for count in (s.network_dim, s.epochs, s.steps, s.train_images):
            assert count is None or _in_range(METADATA_COUNT, count), md
        assert s.network_alpha is None or math.isfinite(s.network_alpha)


@pytest.mark.parametrize("value", ["inf", "1e999", "-inf", "nan"])
def test_one_files_metadata_never_aborts_a_folders_inspect(
    tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 19 item 1: `inspect DIR` with one LoRA whose ss_network_dim is "inf" printed nothing
    and exited 3; now every file gets its record."""
    lora = {"lora_unet_a.lora_down.weight": torch.ones(4, 8), "lora_unet_a.lora_up.weight": torch.ones(8, 4)}
    save_file(lora, str(tmp_path / "good.safetensors"), metadata={"ss_network_dim": "4"})
    meta = {"ss_network_dim": value, "ss_epoch": value, "ss_steps": value}
    save_file(lora, str(tmp_path / "odd.safetensors"), metadata=meta)
    from app.cli import main

    code = main(["inspect", "--json", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code in (0, 1) and "internal error" not in err, err
    records = json.loads(out)
    assert sorted(Path(r["path"]).name for r in records) == ["good.safetensors", "odd.safetensors"]


def test_zlib_text_inflation_is_capped(tmp_path: Path) -> None:
    bomb = zlib.compress(b"a" * (16 << 20), 9)
    body = b"parameters\0\0" + bomb
    chunk = struct.pack(">I", len(body)) + b"zTXt" + body + struct.pack(">I", zlib.crc32(b"zTXt" + body))
    data = _png("x\nSteps: 1")
    path = tmp_path / "z.png"
    path.write_bytes(data[:33] + chunk + data[33:])
    assert read_picture_header(path).skipped == ["a damaged or oversized zTXt chunk"]
    assert read_png_parameters(path) == "x\nSteps: 1"  # the next parameters chunk is still read
