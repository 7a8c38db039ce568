"""A grid on the session at hand (the LoRA strength sweep is one with a strength axis), on the demo's
tiny SD1 checkpoint and LoRA: real files, real networks, real PNGs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from app.demo import DemoLibrary, ensure_demo_library
from core.errors import LoadoutError
from core.generate.command import Opened, open_request
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.generate.session_run import Output
from core.patching.merge import LoraArg
from core.queue.grid import axis_of
from core.queue.session_grid import SessionGrid, run_session_grid


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoLibrary:
    return ensure_demo_library(tmp_path_factory.mktemp("demo"))


def _open(demo: DemoLibrary, out: Path, model: float = 0.8, clip: float = 0.6) -> Opened:
    settings = ImageSettings("a red fox", sampling=Sampling(seed=3, steps=2), width=64, height=64)
    request = GenerateRequest(
        ModelFiles(checkpoint=demo.checkpoint), settings, loras=(LoraArg(demo.lora, model, clip),), output=out
    )
    return open_request(request, lambda p: None)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_old_sweep_and_a_strength_axis_make_the_same_files(demo: DemoLibrary, tmp_path: Path) -> None:
    """The old ``Generator.sweep`` path and the grid's strength axis, on one session: each cell's PNG
    is the same bytes (pixels and text), and the stack is put back as it was."""
    from core.generate.sweep import Sweep

    opened = _open(demo, tmp_path / "fox.png")
    gen, stack = opened.generator, opened.session.loras
    lora_id = next(iter(stack.stack.entries)) if stack.stack is not None else ""
    for follow, name in ((True, "lora-strength"), (False, "lora-model-strength")):
        old_out = Output(tmp_path / f"old-{follow}" / "fox.png")
        new_out = Output(tmp_path / f"new-{follow}" / "fox.png")
        for out in (old_out, new_out):
            out.path.parent.mkdir()
        old = gen.sweep(opened.image, Sweep(lora_id, (0.0, 0.7, 1.5), text_encoder=follow), old_out, print, opened.check)
        grid = SessionGrid(axis_of(name, "0, 0.7, 1.5"), lora=lora_id)
        new = run_session_grid(gen, opened.image, grid, new_out, lambda p: None, opened.check)
        old_cells = [i.path for i in old.images if i.role == "cell"]
        new_cells = [i.path for i in new.images if i.role == "cell"]
        assert [p.name for p in new_cells] == [p.name for p in old_cells] == ["fox-0.png", "fox-0.7.png", "fox-1.5.png"]
        assert [_sha(p) for p in new_cells] == [_sha(p) for p in old_cells]
        assert [i.role for i in new.images] == ["grid", "cell", "cell", "cell"]
        assert new.images[0].path.name == "fox-0-grid.png"
        entry = next(iter(stack.stack.entries.values())) if stack.stack is not None else None
        assert entry is not None and (entry.model_strength, entry.clip_strength) == (0.8, 0.6)


def test_a_model_only_axis_keeps_the_text_encoder_strength_and_labels_say_which(
    demo: DemoLibrary, tmp_path: Path
) -> None:
    opened = _open(demo, tmp_path / "fox.png")
    seen: list[tuple[float, float]] = []
    loras = opened.session.loras
    real = loras.set_strength

    def record(lora_id: str, model: float | None, clip: float | None, bake: bool):  # type: ignore[no-untyped-def]
        seen.append((model or 0.0, clip or 0.0))
        return real(lora_id, model, clip, bake)

    loras.set_strength = record  # type: ignore[method-assign]
    grid = SessionGrid(axis_of("lora-model-strength", "0.4, 1"))
    result = run_session_grid(opened.generator, opened.image, grid, opened.output, lambda p: None, opened.check)
    assert seen == [(0.4, 0.6), (1.0, 0.6), (0.8, 0.6)]  # the text encoder stayed; put back after
    assert [i.label for i in result.images[1:]] == [f"{demo.lora.stem} model 0.4", f"{demo.lora.stem} model 1"]
    both = run_session_grid(
        opened.generator, opened.image, SessionGrid(axis_of("lora-strength", "0.4")), opened.output,
        lambda p: None, opened.check,
    )  # fmt: skip
    assert seen[3] == (0.4, 0.4) and both.images[1].label == f"{demo.lora.stem} 0.4"


def test_a_grid_here_refuses_what_it_cannot_do(demo: DemoLibrary, tmp_path: Path) -> None:
    opened = _open(demo, tmp_path / "fox.png")
    ck = SessionGrid(axis_of("checkpoint", f"{demo.checkpoint}"))
    with pytest.raises(LoadoutError, match="checkpoint axis changes the models"):
        run_session_grid(opened.generator, opened.image, ck, opened.output, lambda p: None, opened.check)
    with pytest.raises(LoadoutError, match="not in the stack"):
        grid = SessionGrid(axis_of("lora-strength", "1"), lora="nope")
        run_session_grid(opened.generator, opened.image, grid, opened.output, lambda p: None, opened.check)
