"""The text-encoder part of a LoRA on one prompt only (ComfyUI's SetClipHooks): the prompt the LoRA
is put on is encoded with the LoRA's text-encoder patches, every other prompt without them.

A tiny SD1 checkpoint (CLIP-L at its real width 768, two layers, the whole vocabulary) and a kohya
LoRA with ``lora_te_`` and ``lora_unet_`` modules, written as files. The reference encodings are
transformers' CLIPTextModel with the checkpoint's text-encoder weights, the LoRA baked into them by
hand at its text-encoder strength (``W + (up @ down) * strength * alpha / rank`` in float32, cast
back to the file's float16, as every bake rounds), or not. The conditionings are read where the
UNet takes them (the first cross-attention's key projection), call by call: with a LoRA on one
prompt the two prompts run as separate calls, the positive's group first."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from torch import nn

from app.demo import TINY_CLIP, tiny_checkpoint_tensors, tiny_lora_tensors
from core.files.safetensors import SafetensorsFile
from core.files.writer import write_safetensors
from core.generate.clip_hooks import ClipHooks, TextPart
from core.generate.generator import Generator
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.request import ImageSettings, Sampling
from core.generate.session_run import Output
from core.patching.schedule import parse_schedule
from core.regions import Box, Region
from core.session import Session
from tests.core.generate.reference import clip_tokenizer

MODEL, CLIP = 0.8, 0.6
SETTINGS = ImageSettings("a lighthouse", "blur", Sampling(seed=5, steps=1, cfg=5.0), 64, 64)
TE = "cond_stage_model.transformer."


@dataclass(frozen=True)
class Files:
    checkpoint: Path
    lora: Path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    root = tmp_path_factory.mktemp("cliphooks")
    files = Files(root / "tiny-sd15.safetensors", root / "inkwash.safetensors")
    write_safetensors(files.checkpoint, tiny_checkpoint_tensors())
    meta = {"ss_network_module": "networks.lora", "ss_base_model_version": "sd_v1"}
    write_safetensors(files.lora, tiny_lora_tensors(), meta)
    return files


@pytest.fixture(scope="module")
def session(files: Files) -> Session:
    session = Session()
    session.load(files.checkpoint, "checkpoint", lambda p: None, lambda: None)
    session.loras.add(files.lora, MODEL, CLIP, on="positive")
    return session


Reference = Callable[[str, float], torch.Tensor]


@pytest.fixture(scope="module")
def reference(files: Files, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """text, text-encoder strength -> transformers' encoding (the last layer after the final norm,
    77 tokens padded with the end token: SD1's) with the LoRA baked by hand at that strength."""
    import transformers

    tokenizer = clip_tokenizer(tmp_path_factory.mktemp("clip_l"), pad_with_end=True)
    ckpt, lora = SafetensorsFile(files.checkpoint), SafetensorsFile(files.lora)
    lora_keys = set(lora)
    state = {k.removeprefix(TE): ckpt.tensor(k) for k in ckpt if k.startswith(TE)}
    config = transformers.CLIPTextConfig(
        vocab_size=49408, hidden_size=TINY_CLIP.hidden_size, intermediate_size=TINY_CLIP.intermediate_size,
        num_hidden_layers=TINY_CLIP.num_layers, num_attention_heads=TINY_CLIP.num_heads,
        max_position_embeddings=77, hidden_act="quick_gelu", eos_token_id=49407, bos_token_id=49406,
        pad_token_id=49407, attn_implementation="sdpa",
    )  # fmt: skip
    models: dict[float, nn.Module] = {}

    def baked(strength: float) -> nn.Module:
        if strength in models:
            return models[strength]
        weights, n = {}, 0
        for key, w in state.items():
            name = "lora_te_" + key.removesuffix(".weight").replace(".", "_")
            if key.endswith(".weight") and f"{name}.lora_up.weight" in lora_keys:
                up, down = lora.tensor(f"{name}.lora_up.weight"), lora.tensor(f"{name}.lora_down.weight")
                scale = float(lora.tensor(f"{name}.alpha")) / down.shape[0]
                w = (w.float() + (up.float() @ down.float()) * (strength * scale)).to(w.dtype)
                n += 1
            weights[key.removeprefix("text_model.")] = w.float()  # transformers 5 names them so
        assert n == 4 * TINY_CLIP.num_layers  # every attention projection of every layer
        model = models[strength] = transformers.CLIPTextModel(config).eval()
        model.load_state_dict(weights, strict=True)
        return model

    def encode(text: str, strength: float) -> torch.Tensor:
        ids = tokenizer(text, padding="max_length", max_length=77, return_tensors="pt").input_ids
        with torch.no_grad():
            out: torch.Tensor = baked(strength)(ids).last_hidden_state
        return out

    return encode


@pytest.fixture()
def contexts(session: Session) -> Iterator[list[torch.Tensor]]:
    """The conditioning of every UNet call (the input of its first cross-attention's key projection)."""
    model = session.loras.stack.patchers["diffusion_model"].model  # type: ignore[union-attr]
    layer = next(m for name, m in model.named_modules() if name.endswith("attn2.to_k"))
    assert isinstance(layer, nn.Linear)
    seen: list[torch.Tensor] = []
    hook = layer.register_forward_hook(lambda m, args, out: seen.append(args[0].detach().float()))
    yield seen
    hook.remove()


def _generate(session: Session, generator: Generator, settings: ImageSettings, out: Path) -> str:
    made = generator.generate(settings, Output(out), lambda p: None, session.placement.manager.check)
    return read_png_parameters(made.images[0].path)


def _close(seen: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(seen, expected, rtol=1e-6, atol=1e-6)


def test_each_prompt_is_encoded_with_its_own_patches(
    session: Session, files: Files, reference: Reference, contexts: list[torch.Tensor], tmp_path: Path
) -> None:
    """One text as both prompts: the positive's encoding has the LoRA's text-encoder part at its
    text-encoder strength (its schedule's keyframes do not reach the text encoder: SetClipHooks
    without ``schedule_clip``), the negative's has none -- two cache entries; afterwards the text
    encoder has the stack's weights again. With the LoRA on the negative next, both encodings are
    taken from the cache the other way round."""
    lora_id = next(iter(session.loras.stack.entries))  # type: ignore[union-attr]
    schedule = parse_schedule(f"{lora_id}=0.25@0, 1@0.5")
    same = replace(SETTINGS, negative=SETTINGS.prompt, lora_schedules=(schedule,))
    generator = Generator(session)
    text = _generate(session, generator, same, tmp_path / "a.png")
    cache = generator.state.conditioning
    assert (cache.misses, len(cache)) == (2, 2)
    with_lora, without = reference(SETTINGS.prompt, CLIP)[0], reference(SETTINGS.prompt, 0.0)[0]
    assert not torch.allclose(with_lora, without, atol=1e-3)
    assert [c.shape[0] for c in contexts] == [1, 1]  # one step: the positive's call, the negative's
    entry = session.loras.stack.entries[lora_id]  # type: ignore[union-attr]
    assert (entry.model_strength, entry.clip_strength, entry.on) == (MODEL, CLIP, "positive")
    patcher = session.loras.stack.patchers["text_encoder:clip-l"]  # type: ignore[union-attr]
    key = next(iter(entry.keys["text_encoder:clip-l"]))
    assert torch.equal(patcher.model.get_parameter(key), patcher.patched_weight(key, cache=False)[0])
    assert f"<lora:{files.lora.stem}:{CLIP:g}:{MODEL:g}:on=positive>" in text
    lora = parse_parameters(text).loras[0]
    assert (lora.model_strength, lora.clip_strength, lora.on) == (MODEL, CLIP, "positive")
    session.loras.set_on(lora_id, "negative")
    try:
        _generate(session, generator, same, tmp_path / "b.png")
    finally:
        session.loras.set_on(lora_id, "positive")
    assert (cache.misses, len(cache)) == (2, 2)
    for seen, expected in zip(contexts, (with_lora, without, without, with_lora), strict=True):
        _close(seen[0], expected)


def test_a_region_prompt_is_encoded_with_the_lora_on_it(
    session: Session, reference: Reference, contexts: list[torch.Tensor], tmp_path: Path
) -> None:
    """On region1: the region's prompt with the LoRA, the two prompts without (their call); the
    region's call also holds the negative's copy of its area (the negative's own encoding)."""
    lora_id = next(iter(session.loras.stack.entries))  # type: ignore[union-attr]
    settings = replace(SETTINGS, regions=(Region("a red boat", Box(0, 0, 32, 32)),))
    session.loras.set_on(lora_id, "region1")
    try:
        _generate(session, Generator(session), settings, tmp_path / "r.png")
    finally:
        session.loras.set_on(lora_id, "positive")
    assert [c.shape[0] for c in contexts] == [2, 2]
    without = [reference(t, 0.0)[0] for t in ("a lighthouse", "blur")]
    expected = [without[1], without[0], without[1], reference("a red boat", CLIP)[0]]  # the negative's first
    for seen, wanted in zip([*contexts[0], *contexts[1]], expected, strict=True):
        _close(seen, wanted)


def test_the_weights_change_only_between_hook_sets() -> None:
    """Prompts grouped by the patches they carry, the weights' group first; a LoRA's strength set
    only when it changes; its own strength back at the end (also after a stop)."""
    parts = (
        TextPart("a", "a.safetensors", 0.6, True, "", "positive"),
        TextPart("b", "b.safetensors", 1.0, True, "", None),
        TextPart("c", "c.safetensors", 0.5, True, "", "region1"),
    )
    calls: list[tuple[str, float]] = []
    hooks = ClipHooks("encoders", parts, lambda lora, s: calls.append((lora, s)))
    pos, neg = frozenset({"positive"}), frozenset({"negative"})
    region = frozenset({"region1", "positive"})
    assert hooks.order([neg, pos, region, neg]) == [2, 0, 3, 1]  # the weights have all: region1 first
    for labels in (neg, neg, pos, region, region):
        hooks.apply(labels)
    assert calls == [("a", 0.0), ("c", 0.0), ("a", 0.6), ("c", 0.5)]
    assert hooks.order([pos, region]) == [1, 0]  # the weights have region1's patches now
    assert hooks.key(neg) != hooks.key(pos) != hooks.key(region) != hooks.key(neg)
    assert hooks.key(region) == hooks.stack_key() and hooks.key(frozenset()) == hooks.key(neg)
    calls.clear()
    with pytest.raises(RuntimeError, match="stopped"), hooks:  # a stop: the own strengths come back
        hooks.apply(neg)
        raise RuntimeError("stopped")
    assert calls == [("a", 0.0), ("c", 0.0), ("a", 0.6), ("c", 0.5)]
