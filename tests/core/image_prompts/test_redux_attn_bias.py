"""FLUX Redux's strength type "attn_bias" (ComfyUI's StyleModelApply): the picture's tokens appended
unscaled and ``log(strength)`` added to the attention logits on their keys.

The mask is ComfyUI's: :func:`comfy_mask` builds it here as StyleModelApply does, picture by picture
(a float16 mask over text + appended tokens + a 1-token picture, grown by quadrants; "multiply"
pictures after the first biased one add zero columns), then stretched to the latent's token grid as
Flux's ``extra_conds`` does (bilinear, as ``upscale_dit_mask``); Loadout's spans and attention patch
give the same values bit for bit. The whole picture equals diffusers' ``FluxPipeline`` fed that
mask as an additive attention mask (``joint_attention_kwargs={"attention_mask": ...}``: every
double and single block's SDPA gets it), on real 128-wide heads; at strength 1 "attn_bias" is
"multiply" bit for bit; strength 0 is refused in words.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch.nn.functional import interpolate

from core.errors import LoadoutError
from core.generate.passes import Appended, append_tokens
from core.generate.pictures import read_picture, unit_pixels
from core.generate.pipeline import Compute, Hooks, Pipeline
from core.generate.redux import ReduxPass, attention_bias, read_pictures, redux_tokens, token_scale
from core.generate.request import ImageSettings, Sampling
from core.generate.workflow_request import ReduxUse
from core.loading.image_encoder import load_image_encoder
from core.loading.image_prompts import load_style_model
from core.models.flux import pack_latents
from core.sampling import for_family, ksampler_sigmas
from core.sampling.conditioning import Conditioning, can_concat, concat
from core.sampling.prompt_bias import bias_mask
from core.text.conditioning import FLUX_T5_MIN_LENGTH
from tests.core.generate.reference import to_unit_image
from tests.fixtures.image_prompt_files import hf_redux, hf_siglip, save

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("sentencepiece")
pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:.*FluxPosEmbed.*:FutureWarning"),
]


def comfy_mask(
    n_txt: int, pictures: list[tuple[int, float, str]], grid: tuple[int, int]
) -> torch.Tensor | None:
    """ComfyUI's attention mask for a prompt of ``n_txt`` tokens and ``pictures`` (tokens, strength,
    type) applied in order, stretched to a ``grid`` of picture tokens: ``[1, L, L]`` float16."""
    mask, txt = None, n_txt
    for n, strength, kind in pictures:
        if mask is not None or (kind == "attn_bias" and strength != 1.0):
            bias = torch.log(torch.tensor([strength if kind == "attn_bias" else 1.0]))
            if mask is None:
                mask = torch.zeros((1, txt + 1, txt + 1), dtype=torch.float16)
            grown = torch.zeros((1, txt + n + 1, txt + n + 1), dtype=torch.float16)
            new, old = (slice(0, txt), slice(txt + n, None)), (slice(0, txt), slice(txt, None))
            for rows, was_rows in zip(new, old, strict=True):
                for cols, was_cols in zip(new, old, strict=True):
                    grown[:, rows, cols] = mask[:, was_rows, was_cols]
            grown[:, :txt, txt : txt + n] = bias
            grown[:, txt + n :, txt : txt + n] = bias
            mask = grown
        txt += n
    if mask is None:
        return None
    h, w = grid  # upscale_dit_mask from a 1 x 1 picture: each quadrant stretched bilinearly
    t2t, t2i, i2t, i2i = mask[:, :txt, :txt], mask[:, :txt, txt:], mask[:, txt:, :txt], mask[:, txt:, txt:]
    t2i = interpolate(t2i.reshape(1, txt, 1, 1), size=grid, mode="bilinear").reshape(1, txt, h * w)
    i2t = interpolate(i2t.reshape(1, txt, 1, 1), size=grid, mode="bilinear").reshape(1, txt, h * w)
    i2i = interpolate(i2i.reshape(1, 1, 1, 1), size=grid, mode="bilinear").reshape(1, h * w, 1, 1)
    i2i = interpolate(i2i, size=grid, mode="bilinear").reshape(1, h * w, h * w)
    return torch.cat((torch.cat((t2t, t2i), 2), torch.cat((i2t.transpose(1, 2), i2i), 2)), 1)


def _ours(
    n_txt: int, pictures: list[tuple[int, float, str]], grid: tuple[int, int], dtype: torch.dtype
) -> Any:
    cond = Conditioning(torch.zeros(1, n_txt, 4))
    blocks = [
        Appended(torch.ones(1, n, 4), attention_bias(ReduxUse(Path("r"), Path("p"), s, kind)))
        for n, s, kind in pictures
    ]
    out = append_tokens(cond, blocks)
    length = out.context.shape[1] + grid[0] * grid[1]
    return out, bias_mask(
        out.attention_bias, out.context.shape[1], length, length, torch.zeros((), dtype=dtype)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_mask_is_comfyuis_bit_for_bit(dtype: torch.dtype) -> None:
    pictures = [(3, 1.5, "multiply"), (4, 0.5, "attn_bias"), (2, 1.0, "attn_bias"), (3, 2.7, "attn_bias"),
                (2, 0.3, "multiply")]  # fmt: skip
    theirs = comfy_mask(5, pictures, (3, 4))
    cond, ours = _ours(5, pictures, (3, 4), dtype)
    assert theirs is not None and not theirs.isnan().any()
    assert torch.equal(ours[0], theirs.to(dtype))  # ComfyUI's model casts its mask to the compute dtype
    assert [(s.start, s.count) for s in cond.attention_bias] == [(8, 4), (14, 3)]
    assert comfy_mask(5, [(3, 1.0, "attn_bias"), (2, 0.4, "multiply")], (2, 2)) is None
    assert _ours(5, [(3, 1.0, "attn_bias"), (2, 0.4, "multiply")], (2, 2), dtype)[0].attention_bias == ()


def test_a_biased_prompt_batches_only_with_the_same_biases() -> None:
    plain = Conditioning(torch.zeros(1, 9, 4))
    biased = append_tokens(Conditioning(torch.zeros(1, 5, 4)), [Appended(torch.ones(1, 4, 4), -0.69)])
    assert can_concat(plain, plain) and not can_concat(biased, plain) and not can_concat(plain, biased)
    assert can_concat(biased, biased)
    both = concat([biased, biased])
    assert both.batch == 2 and both.attention_bias == biased.attention_bias
    assert biased.repeat_to(3).attention_bias == biased.to(torch.device("cpu"), torch.float64).attention_bias
    with pytest.raises(LoadoutError, match="outside the prompt"):
        replace(plain, attention_bias=(replace(biased.attention_bias[0], start=7),))


def test_strength_0_with_attn_bias_is_refused_in_words(tmp_path: Path) -> None:
    picture = tmp_path / "p.png"
    Image.new("RGB", (8, 8)).save(picture)
    with pytest.raises(LoadoutError, match="log of 0 is minus infinity") as caught:
        read_pictures((ReduxUse(tmp_path / "r.safetensors", picture, 0.0, "attn_bias"),), "flux-dev")
    assert "multiply" in caught.value.fix
    read_pictures((ReduxUse(tmp_path / "r.safetensors", picture, 0.0, "multiply"),), "flux-dev")
    with pytest.raises(LoadoutError, match="strength type"):
        ReduxUse(tmp_path / "r.safetensors", picture, 1.0, "add")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from tests.core.image_prompts.flux_pair import flux_pair

    root = tmp_path_factory.mktemp("attn_bias")
    encoder = save(hf_siglip(layers=1, seed=11, head=False), root / "sigclip_vision_patch14_384.safetensors")
    pipe, nets, t5_tok, width = flux_pair(root)
    redux = save(hf_redux(width, seed=12), root / "flux1-redux-dev.safetensors")
    pictures = []
    for i, (w, h) in enumerate(((400, 300), (280, 360))):
        rng = np.random.default_rng(20 + i)
        small = rng.integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
        pictures.append(root / f"p{i}.png")
        Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC).save(pictures[-1])
    return {"pipe": pipe, "nets": nets, "tok": t5_tok, "encoder": load_image_encoder(encoder),
            "style": load_style_model(redux), "redux": redux, "pictures": pictures}  # fmt: skip


def _settings() -> ImageSettings:
    sampling = Sampling(seed=7, steps=3, sampler="euler", scheduler="simple", guidance=3.5)
    return ImageSettings("a lighthouse at dusk", width=64, height=64, sampling=sampling)


def _run(made: dict[str, Any], uses: tuple[ReduxUse, ...]) -> np.ndarray:
    """The picture of these Redux uses (each made once per module: the tests share them)."""
    runs: dict[tuple[ReduxUse, ...], np.ndarray] = made.setdefault("runs", {})
    if uses in runs:
        return runs[uses]
    styles = (made["style"],) * len(uses)
    step = ReduxPass(read_pictures(uses, "flux-dev"), made["encoder"], styles)
    pipeline = Pipeline(made["nets"], Compute(), t5_tokenizer=made["tok"])
    runs[uses] = to_unit_image(pipeline.run(_settings(), Hooks(), None, [step])[0])
    return runs[uses]


def test_attn_bias_at_strength_1_is_multiply_bit_for_bit(made: dict[str, Any]) -> None:
    a, b = made["pictures"]
    multiply = _run(made, (ReduxUse(made["redux"], a, 1.0), ReduxUse(made["redux"], b, 1.0)))
    biased = _run(
        made, (ReduxUse(made["redux"], a, 1.0, "attn_bias"), ReduxUse(made["redux"], b, 1.0, "attn_bias"))
    )
    assert np.array_equal(multiply, biased)


def test_attn_bias_equals_flux_pipeline_with_comfyuis_additive_mask(made: dict[str, Any]) -> None:
    a, b = made["pictures"]
    uses = (ReduxUse(made["redux"], a, 0.4, "attn_bias"), ReduxUse(made["redux"], b, 3.0, "attn_bias"))
    ours = _run(made, uses)
    unbiased = _run(made, tuple(replace(u, strength=1.0, strength_type="multiply") for u in uses))

    tokens = []
    for use in uses:  # the tokens as they are appended (proven against diffusers: test_redux_parity.py)
        unit = unit_pixels(read_picture(use.picture, "picture"))
        with torch.no_grad():
            tokens.append(redux_tokens(made["encoder"], made["style"], unit, token_scale(use),
                                       torch.device("cpu"), torch.float32))  # fmt: skip
    pipe, s = made["pipe"], _settings().sampling
    with torch.no_grad():
        embeds, pooled, _ = pipe.encode_prompt(
            _settings().prompt, None, max_sequence_length=FLUX_T5_MIN_LENGTH, device="cpu"
        )
    pictures = [(t.shape[1], u.strength, u.strength_type) for t, u in zip(tokens, uses, strict=True)]
    mask = comfy_mask(embeds.shape[1], pictures, (4, 4))
    assert mask is not None
    # the same bias on every query row (the appended tokens' own rows too): not ComfyUI's
    everywhere, start = mask.clone(), embeds.shape[1]
    everywhere[:, start : start + sum(t.shape[1] for t in tokens)] = mask[:, -1:]

    def theirs(additive: torch.Tensor) -> np.ndarray:
        sigmas = ksampler_sigmas(for_family("flux-dev"), s.scheduler, s.sampler, s.steps)
        noise = torch.randn((1, 16, 8, 8), generator=torch.Generator("cpu").manual_seed(s.seed))
        with torch.no_grad():
            out = pipe(
                prompt_embeds=torch.cat((embeds, *tokens), dim=1), pooled_prompt_embeds=pooled,
                num_inference_steps=s.steps, sigmas=sigmas[:-1].tolist(), guidance_scale=3.5,
                latents=pack_latents(noise), height=64, width=64, output_type="np",
                joint_attention_kwargs={"attention_mask": additive.float()[:, None]},
            ).images  # fmt: skip
        return np.asarray(out)

    reference = theirs(mask)
    err = float(np.abs(ours - reference).max())
    moved = {
        "unbiased": float(np.abs(ours - unbiased).mean()),
        "every row": float(np.abs(ours - theirs(everywhere)).mean()),
    }
    floor = float(np.abs(ours - reference).mean())
    print(f"attn_bias: max |ours - diffusers| = {err * 255:.4f}/255, mean {floor * 255:.6f}/255; "
          f"it differs from {({k: round(m / floor) for k, m in moved.items()})} x that")  # fmt: skip
    assert err * 255 < 3 and float(ours.std()) > 0.05
    assert all(m > 20 * floor for m in moved.values()), moved  # a wrong rule would fail here


def test_the_patch_adds_the_bias_to_a_networks_own_mask_as_sdpa_would() -> None:
    """Chroma's text mask (boolean, True attends) and the bias: ComfyUI reads a boolean mask as
    log(mask) (0 or -inf) and adds; the patched joint attention equals SDPA with that sum."""
    from core.models.patches import AttentionRoute, NetworkPatches, Site, attend_heads
    from core.sampling.prompt_bias import BiasedPrompt

    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 11, 8, generator=gen) for _ in range(3))  # (B, H, 5 + 3 prompt, 3 picture)
    keep = torch.ones(2, 1, 1, 11, dtype=torch.bool)
    keep[1, ..., 1] = False  # a padding token of the second item
    spans = append_tokens(
        Conditioning(torch.zeros(1, 5, 4)), [Appended(torch.ones(1, 3, 4), -0.69)]
    ).attention_bias
    route = AttentionRoute(NetworkPatches(attention=(BiasedPrompt(spans, 8),)), Site("double", 0))
    ours = attend_heads(route, q, k, v, 0, "joint", keep)
    additive = torch.zeros(2, 1, 11, 11).masked_fill(~keep, float("-inf"))
    additive[:, :, :5, 5:8] += -0.69
    additive[:, :, 8:, 5:8] += -0.69
    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=additive)
    assert torch.equal(ours, theirs.transpose(1, 2).reshape(2, 11, 16))
