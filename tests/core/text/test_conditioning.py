"""Per-family conditioning against a transformers computation of ComfyUI's rules, on tiny towers
with CLIP's real vocabulary size (ids up to 49407) and a tiny T5."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from core.models.clip import CLIPTextConfig, CLIPTextModel
from core.models.t5 import T5Config, T5Encoder
from core.text import ConditioningCache, PromptEncoder, TextEncoders, sdxl_adm
from core.text.cache import CacheKey
from core.text.chunking import ChunkSpec, tokenize_weighted
from core.text.clip_tokenizer import ClipTokenizer
from core.text.conditioning import EncodeOptions

transformers = pytest.importorskip("transformers")

PROMPT = "a (red:1.3) cat, ((fluffy)), " + "detailed " * 80  # two windows, weights


def randomize(model: nn.Module, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * noise)
            elif p.ndim == 2 and "embed" not in name and "shared" not in name and "relative" not in name:
                p.copy_(noise / math.sqrt(p.shape[1]))
            else:
                p.copy_(0.5 * noise)
    return model.eval()


def tiny_pair(width: int, projection: bool, seed: int) -> tuple[CLIPTextModel, nn.Module]:
    hf_cfg = transformers.CLIPTextConfig(
        vocab_size=49408, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=3,
        num_attention_heads=4, max_position_embeddings=77, hidden_act="gelu", projection_dim=width,
        eos_token_id=49407, bos_token_id=49406, pad_token_id=49407, attn_implementation="eager",
    )  # fmt: skip
    cls = transformers.CLIPTextModelWithProjection if projection else transformers.CLIPTextModel
    ref = randomize(cls(hf_cfg), seed)
    state = {
        k if k.startswith(("text_model.", "text_projection")) else f"text_model.{k}": v
        for k, v in ref.state_dict().items()
    }
    cfg = CLIPTextConfig(
        hidden_size=width, intermediate_size=2 * width, num_layers=3, num_heads=4, hidden_act="gelu",
        projection_dim=width if projection else None,
    )  # fmt: skip
    ours = CLIPTextModel(cfg)
    ours.load_state_dict(state, strict=True)
    return ours, ref


def hf_encode(ref: nn.Module, windows: list[list[int]], weights: list[list[float]], spec: ChunkSpec, pick):  # type: ignore[no-untyped-def]
    """ComfyUI's encode_token_weights written against transformers outputs."""
    batch = [list(w) for w in windows]
    weighted = any(x != 1.0 for row in weights for x in row)
    if weighted:
        empty = [spec.start, spec.end] + [spec.pad] * (len(batch[0]) - 2)
        batch.append(empty)
    with torch.no_grad():
        out = ref(torch.tensor(batch), output_hidden_states=True)
    hidden, pooled = pick(out)
    z = hidden[: len(windows)].clone()
    if weighted:
        for k, row in enumerate(weights):
            for j, w in enumerate(row):
                if w != 1.0:
                    z[k, j] = (z[k, j] - hidden[-1, j]) * w + hidden[-1, j]
    return torch.cat(list(z), dim=0)[None], pooled[0:1]


def final_norm(ref: nn.Module) -> nn.Module:
    inner = getattr(ref, "text_model", ref)
    norm: nn.Module = inner.final_layer_norm
    return norm


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.shape == b.shape
    a, b = a.detach(), b.detach()
    assert float((a - b).abs().max()) <= 1e-5 * float(b.abs().max())


@pytest.fixture(scope="module")
def tok() -> ClipTokenizer:
    return ClipTokenizer()


def test_sd1_last_layer_normed_with_weights(tok: ClipTokenizer) -> None:
    ours, ref = tiny_pair(32, projection=False, seed=1)
    cond = PromptEncoder("sd1", TextEncoders(clip_l=ours), clip_tokenizer=tok).encode(PROMPT)
    spec = ChunkSpec.clip(pad_with_end=True)
    t = tokenize_weighted(PROMPT, tok.encode, spec)
    assert len(t.chunks) == 2 and t.has_weights
    ctx, pooled = hf_encode(ref, t.ids(), t.weights(), spec, lambda o: (o.last_hidden_state, o.pooler_output))
    close(cond.context, ctx)
    assert cond.pooled is not None
    close(cond.pooled, pooled)
    assert cond.context.shape == (1, 154, 32) and cond.guidance is None


def test_sd1_clip_skip_is_penultimate_normed(tok: ClipTokenizer) -> None:
    ours, ref = tiny_pair(32, projection=False, seed=2)
    enc = PromptEncoder(
        "sd1", TextEncoders(clip_l=ours), clip_tokenizer=tok, options=EncodeOptions(clip_skip=-2)
    )
    cond = enc.encode("a cat")
    t = tokenize_weighted("a cat", tok.encode, ChunkSpec.clip(pad_with_end=True))
    with torch.no_grad():
        out = ref(torch.tensor(t.ids()), output_hidden_states=True)
    close(cond.context, final_norm(ref)(out.hidden_states[-2]))


def test_sd2_penultimate_normed_projected_pooled_pads_with_zero(tok: ClipTokenizer) -> None:
    ours, ref = tiny_pair(32, projection=True, seed=3)
    cond = PromptEncoder("sd2", TextEncoders(clip_h=ours), clip_tokenizer=tok).encode(PROMPT)
    spec = ChunkSpec.clip(pad_with_end=False)
    t = tokenize_weighted(PROMPT, tok.encode, spec)
    assert t.ids()[1][-1] == 0
    norm = final_norm(ref)
    ctx, pooled = hf_encode(
        ref, t.ids(), t.weights(), spec, lambda o: (norm(o.hidden_states[-2]), o.text_embeds)
    )
    close(cond.context, ctx)
    assert cond.pooled is not None
    close(cond.pooled, pooled)


def test_sdxl_l_and_g_penultimate_unnormed_g_pooled_and_adm(tok: ClipTokenizer) -> None:
    l_ours, l_ref = tiny_pair(32, projection=False, seed=4)
    g_ours, g_ref = tiny_pair(48, projection=True, seed=5)
    cond = PromptEncoder("sdxl", TextEncoders(clip_l=l_ours, clip_g=g_ours), clip_tokenizer=tok).encode(
        PROMPT
    )
    l_spec, g_spec = ChunkSpec.clip(pad_with_end=True), ChunkSpec.clip(pad_with_end=False)
    tl, tg = (tokenize_weighted(PROMPT, tok.encode, s) for s in (l_spec, g_spec))
    l_ctx, _ = hf_encode(
        l_ref, tl.ids(), tl.weights(), l_spec, lambda o: (o.hidden_states[-2], o.pooler_output)
    )
    g_ctx, g_pooled = hf_encode(
        g_ref, tg.ids(), tg.weights(), g_spec, lambda o: (o.hidden_states[-2], o.text_embeds)
    )
    close(cond.context, torch.cat([l_ctx, g_ctx], dim=-1))
    assert cond.pooled is not None
    close(cond.pooled, g_pooled)
    adm = sdxl_adm(cond.pooled, width=1024, height=768)
    from diffusers.models.embeddings import get_timestep_embedding

    sizes = torch.tensor([768.0, 1024.0, 0.0, 0.0, 768.0, 1024.0])
    ref_flat = get_timestep_embedding(sizes, 256, flip_sin_to_cos=True, downscale_freq_shift=0).flatten()
    assert adm.shape == (1, 48 + 6 * 256)
    close(adm[0, 48:], ref_flat)


@pytest.fixture(scope="module")
def t5_pair() -> tuple[T5Encoder, nn.Module]:
    cfg = transformers.T5Config(
        vocab_size=64, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu",
        relative_attention_num_buckets=8, is_encoder_decoder=False, use_cache=False,
    )  # fmt: skip
    ref = randomize(transformers.T5EncoderModel(cfg), 7)
    ours = T5Encoder(T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
                              relative_attention_num_buckets=8))  # fmt: skip
    ours.load_state_dict(ref.state_dict(), strict=False)
    return ours, ref


class WordIds:
    """A stand-in T5 vocabulary (ids 3..63 by word), for checking layout and weights numerically."""

    def encode(self, text: str) -> list[int]:
        return [3 + (sum(map(ord, w)) % 61) for w in text.split()]


def test_flux_t5_context_min_256_clip_l_pooled_guidance(tok: ClipTokenizer, t5_pair) -> None:  # type: ignore[no-untyped-def]
    t5, t5_ref = t5_pair
    l_ours, l_ref = tiny_pair(32, projection=False, seed=8)
    enc = PromptEncoder(
        "flux", TextEncoders(clip_l=l_ours, t5=t5), clip_tokenizer=tok, t5_tokenizer=WordIds()
    )  # type: ignore[arg-type]
    prompt = "a (red:1.5) fox in snow"
    cond = enc.encode(prompt)
    spec = ChunkSpec.t5(min_length=256)
    t = tokenize_weighted(prompt, WordIds().encode, spec)
    assert len(t.ids()[0]) == 256 and t.ids()[0][5:7] == [1, 0]
    with torch.no_grad():
        ids = torch.tensor([t.ids()[0], [1] + [0] * 255])
        hidden = t5_ref(ids).last_hidden_state
    w = torch.tensor(t.weights()[0])[:, None]
    expected = torch.where(w != 1.0, (hidden[0] - hidden[1]) * w + hidden[1], hidden[0])[None]
    close(cond.context, expected)
    tl = tokenize_weighted(prompt, tok.encode, ChunkSpec.clip(pad_with_end=True))
    with torch.no_grad():
        pooled = l_ref(torch.tensor([*tl.ids(), [49406, 49407] + [49407] * 75])).pooler_output[0:1]
    assert cond.pooled is not None
    close(cond.pooled, pooled)
    assert cond.guidance == 3.5


def test_sd3_layout_and_missing_parts(tok: ClipTokenizer) -> None:
    # SD3's T5 is 4096 wide like the padded CLIP context: a narrow tower with that width
    t5 = randomize(T5Encoder(T5Config(vocab_size=64, d_model=4096, d_kv=8, d_ff=16, num_layers=1, num_heads=2,
                                      relative_attention_num_buckets=8)), 12)  # fmt: skip
    assert isinstance(t5, T5Encoder)
    l_ours, _ = tiny_pair(32, projection=False, seed=9)
    g_ours, _ = tiny_pair(48, projection=True, seed=10)
    full = PromptEncoder("sd3", TextEncoders(clip_l=l_ours, clip_g=g_ours, t5=t5), clip_tokenizer=tok,
                         t5_tokenizer=WordIds())  # type: ignore[arg-type]  # fmt: skip
    cond = full.encode("a cat")
    assert cond.context.shape == (1, 77 + 77, 4096)  # CLIP window + T5 padded to 77
    assert torch.all(cond.context[0, :77, 80:4096] == 0)  # 32 + 48 channels, zero-padded
    sd = PromptEncoder("sdxl", TextEncoders(clip_l=l_ours, clip_g=g_ours), clip_tokenizer=tok).encode("a cat")
    close(cond.context[:, :77, :80], sd.context)
    assert cond.pooled is not None and cond.pooled.shape == (1, 80)
    no_t5 = PromptEncoder("sd3", TextEncoders(clip_l=l_ours, clip_g=g_ours), clip_tokenizer=tok).encode(
        "a cat"
    )
    assert no_t5.context.shape == (1, 77, 4096)
    g_only = PromptEncoder("sd3", TextEncoders(clip_g=g_ours), clip_tokenizer=tok).encode("a cat")
    assert g_only.pooled is not None and torch.all(g_only.pooled[0, :768] == 0)
    assert torch.all(g_only.context[0, :, :768] == 0) and g_only.context.shape == (1, 77, 4096)
    nothing = PromptEncoder("sd3", TextEncoders()).encode("a cat")
    assert torch.all(nothing.context == 0) and nothing.context.shape == (1, 77, 4096)


def test_missing_encoder_and_tokenizer_errors(tok: ClipTokenizer, t5_pair) -> None:  # type: ignore[no-untyped-def]
    from core.errors import LoadoutError, ModelMismatchError

    with pytest.raises(ModelMismatchError, match="CLIP-G"):
        PromptEncoder("sdxl", TextEncoders(clip_l=tiny_pair(32, False, 1)[0]), clip_tokenizer=tok)
    with pytest.raises(LoadoutError, match="T5 tokenizer"):
        PromptEncoder("pixart_t5", TextEncoders(t5=t5_pair[0]))


def test_cache_hits_on_same_state_misses_on_clip_strength(tok: ClipTokenizer) -> None:
    ours, _ = tiny_pair(32, projection=False, seed=11)
    enc = PromptEncoder("sd1", TextEncoders(clip_l=ours), clip_tokenizer=tok)
    cache = ConditioningCache(capacity=2)
    calls: list[str] = []

    def encode(prompt: str):  # type: ignore[no-untyped-def]
        calls.append(prompt)
        return enc.encode(prompt)

    opts = EncodeOptions()
    base = CacheKey(("model-1", (("lora.safetensors", 1.0),)), "sd1", opts, "a cat")
    first = cache.get_or_encode(base, encode)
    assert cache.get_or_encode(base, encode) is first and calls == ["a cat"]  # new seed / UNet strength
    changed = CacheKey(("model-1", (("lora.safetensors", 0.5),)), "sd1", opts, "a cat")
    cache.get_or_encode(changed, encode)
    cache.get_or_encode(CacheKey("m", "sd1", opts, "dog"), encode)
    assert len(cache) == 2 and len(calls) == 3
    cache.get_or_encode(base, encode)  # evicted (least recently used): encoded again
    assert len(calls) == 4 and cache.hits == 1
