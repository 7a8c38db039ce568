"""Text encoders (CLIP L/H/G, T5, UMT5) against transformers, and the open_clip key conversion.

Parity: tiny random configs, fp32, max |ours - reference| / max |reference| <= 1e-4 on every output.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from core.errors import ModelMismatchError
from core.loading.convert.open_clip import hf_to_open_clip, open_clip_to_hf
from core.models.clip import CLIPOutput, CLIPTextConfig, CLIPTextModel
from core.models.t5 import T5Config, T5Encoder

transformers = pytest.importorskip("transformers")

TOL = 1e-4
VOCAB, EOS, PAD = 100, 99, 0


def rel_err(ours: torch.Tensor | None, ref: torch.Tensor) -> float:
    assert ours is not None and ours.shape == ref.shape
    ours, ref = ours.detach().float(), ref.detach().float()
    return float((ours - ref).abs().max() / ref.abs().max())


def randomize(model: nn.Module, seed: int) -> nn.Module:
    """Weights large enough that every part of the network shows in the output."""
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


def token_ids(pad: int = PAD) -> torch.Tensor:
    """Two prompts: one short (end-of-text at 5, then padding), one filling all 12 positions."""
    ids = torch.randint(1, EOS - 1, (2, 12), generator=torch.Generator().manual_seed(1))
    ids[0, 5], ids[0, 6:] = EOS, pad
    ids[1, 11] = EOS
    return ids


PADDING_MASK = torch.tensor([[1] * 6 + [0] * 6, [1] * 12])


def tiny_clip(act: str, projection: int | None, eos: int | None = EOS) -> CLIPTextConfig:
    return CLIPTextConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_layers=3, num_heads=4,
        max_positions=16, hidden_act=act, projection_dim=projection, eos_token_id=eos,
    )  # fmt: skip


def hf_clip_config(c: CLIPTextConfig, eos: int = EOS) -> object:
    return transformers.CLIPTextConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
        max_position_embeddings=c.max_positions, hidden_act=c.hidden_act,
        projection_dim=c.projection_dim or 8, eos_token_id=eos, bos_token_id=EOS - 1, pad_token_id=PAD,
        attn_implementation="eager",
    )  # fmt: skip


def file_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers 5 keeps CLIPTextModel's keys unprefixed; real files (and ours) nest them in text_model."""
    return {
        k if k.startswith(("text_model.", "text_projection")) else f"text_model.{k}": v
        for k, v in state.items()
    }


def hf_clip_with_projection(c: CLIPTextConfig, seed: int = 0) -> nn.Module:
    return randomize(transformers.CLIPTextModelWithProjection(hf_clip_config(c)), seed)


# --------------------------------------------------------------------------------------------- CLIP


def test_clip_l_parity_quick_gelu_penultimate_and_pooled() -> None:
    cfg = tiny_clip("quick_gelu", None)
    ref = randomize(transformers.CLIPTextModel(hf_clip_config(cfg)), seed=0)
    state = file_layout(ref.state_dict())
    state["text_model.embeddings.position_ids"] = torch.arange(16.0)[None] + 0.3  # SD1 files' broken copy
    model = CLIPTextModel(cfg)
    model.load_state_dict(state, strict=True)
    ids = token_ids(pad=EOS)  # SD1 pads with the end-of-text token: pooling takes its first occurrence
    for mask in (None, PADDING_MASK):
        with torch.no_grad():
            r = ref(ids, attention_mask=mask, output_hidden_states=True)
            out = model(ids, attention_mask=mask, output_layer=-2)
            emb = model(ids, attention_mask=mask, output_layer=0).hidden_state
        assert rel_err(out.last_hidden_state, r.last_hidden_state) <= TOL
        assert rel_err(out.hidden_state, r.hidden_states[-2]) <= TOL
        assert rel_err(emb, r.hidden_states[0]) <= TOL
        assert rel_err(out.pooled, r.pooler_output) <= TOL
        assert out.text_embeds is None
    assert not torch.equal(out.hidden_state, r.hidden_states[-1])  # penultimate really is not the last


def test_clip_g_parity_gelu_with_projection() -> None:
    cfg = tiny_clip("gelu", 24)
    ref = hf_clip_with_projection(cfg, seed=2)
    model = CLIPTextModel(cfg)
    model.load_state_dict(ref.state_dict(), strict=True)
    ids = token_ids()
    with torch.no_grad():
        r = ref(ids, output_hidden_states=True)
        out = model(ids, output_layer=-2)
    assert rel_err(out.last_hidden_state, r.last_hidden_state) <= TOL
    assert rel_err(out.hidden_state, r.hidden_states[-2]) <= TOL
    assert rel_err(out.text_embeds, r.text_embeds) <= TOL
    assert rel_err(model.final_norm(out.hidden_state), r.last_hidden_state) > 1e-2  # a different layer


def test_clip_legacy_pooling_takes_highest_token_id() -> None:
    cfg = tiny_clip("gelu", 24, eos=None)
    ref = randomize(transformers.CLIPTextModelWithProjection(hf_clip_config(cfg, eos=2)), seed=3)
    model = CLIPTextModel(cfg)
    model.load_state_dict(ref.state_dict(), strict=True)
    ids = token_ids()
    with torch.no_grad():
        assert rel_err(model(ids).text_embeds, ref(ids).text_embeds) <= TOL


def test_clip_compute_dtype_and_errors() -> None:
    cfg = tiny_clip("quick_gelu", 24)
    model = CLIPTextModel(cfg)
    model.load_state_dict(hf_clip_with_projection(cfg).state_dict())
    ids = token_ids()
    with torch.no_grad():
        full, half = model(ids), model(ids, dtype=torch.bfloat16)
    assert (
        half.last_hidden_state.dtype == torch.bfloat16
        and model.text_model.final_layer_norm.weight.dtype == (torch.float32)
    )
    assert rel_err(half.last_hidden_state, full.last_hidden_state) < 5e-2
    with pytest.raises(ValueError, match="output_layer"):
        model(ids, output_layer=-5)
    with pytest.raises(Exception, match="at most 16"):
        model(torch.zeros(1, 17, dtype=torch.long))


# ----------------------------------------------------------------------------------------- open_clip


def open_clip_reference(sd: dict[str, torch.Tensor], ids: torch.Tensor, heads: int) -> torch.Tensor:
    """open_clip's text tower written from its own key names with torch's MultiheadAttention (which
    is what open_clip uses): pooled end-of-text token @ text_projection."""
    width, length = sd["token_embedding.weight"].shape[1], ids.shape[1]
    x = F.embedding(ids, sd["token_embedding.weight"]) + sd["positional_embedding"][:length]
    causal = torch.full((length, length), float("-inf")).triu(1)
    layers = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("transformer.resblocks."))
    for i in range(layers):
        p = f"transformer.resblocks.{i}."
        mha = nn.MultiheadAttention(width, heads, batch_first=True)
        mha.load_state_dict({k[len(p + "attn.") :]: v for k, v in sd.items() if k.startswith(p + "attn.")})
        h = F.layer_norm(x, (width,), sd[p + "ln_1.weight"], sd[p + "ln_1.bias"])
        x = x + mha(h, h, h, attn_mask=causal, need_weights=False)[0]
        h = F.layer_norm(x, (width,), sd[p + "ln_2.weight"], sd[p + "ln_2.bias"])
        h = F.gelu(F.linear(h, sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"]))
        x = x + F.linear(h, sd[p + "mlp.c_proj.weight"], sd[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (width,), sd["ln_final.weight"], sd["ln_final.bias"])
    return x[torch.arange(ids.shape[0]), ids.argmax(dim=-1)] @ sd["text_projection"]


def test_open_clip_round_trip_and_parity() -> None:
    cfg = tiny_clip("gelu", 24)
    ref = hf_clip_with_projection(cfg, seed=4)
    hf_sd = dict(ref.state_dict())
    oc = hf_to_open_clip(hf_sd, num_layers=3)
    assert oc["transformer.resblocks.2.attn.in_proj_weight"].shape == (96, 32)
    assert oc["text_projection"].shape == (32, 24)  # used as x @ P
    assert not any(k.startswith("text_model.") for k in oc)
    ids = token_ids()
    with torch.no_grad():
        r = ref(ids, output_hidden_states=True)
        assert rel_err(open_clip_reference(oc, ids, heads=4), r.text_embeds) <= TOL

    extras = {"logit_scale": torch.tensor(4.6), "visual.proj": torch.zeros(3, 3)}
    back = open_clip_to_hf({**oc, **extras}, num_layers=3)
    assert back.keys() == hf_sd.keys()
    assert all(torch.equal(back[k], hf_sd[k]) for k in hf_sd)
    model = CLIPTextModel(cfg)
    model.load_state_dict(back, strict=True)
    with torch.no_grad():
        out = model(ids, output_layer=-2)
    assert rel_err(out.text_embeds, r.text_embeds) <= TOL
    assert rel_err(out.hidden_state, r.hidden_states[-2]) <= TOL


def test_open_clip_refuses_unknown_and_missing_keys() -> None:
    oc = hf_to_open_clip(hf_clip_with_projection(tiny_clip("gelu", 24)).state_dict(), num_layers=3)
    with pytest.raises(ModelMismatchError, match=r"(?i)unknown keys.*attn_bias"):
        open_clip_to_hf({**oc, "transformer.resblocks.0.attn_bias": torch.zeros(1)}, num_layers=3)
    with pytest.raises(ModelMismatchError, match=r"(?i)missing keys.*resblocks.3"):
        open_clip_to_hf(oc, num_layers=4)
    without = {k: v for k, v in oc.items() if k != "transformer.resblocks.1.mlp.c_fc.bias"}
    with pytest.raises(ModelMismatchError, match=r"mlp.c_fc.bias"):
        open_clip_to_hf(without, num_layers=3)
    with pytest.raises(ModelMismatchError, match=r"(?i)unknown keys.*stray"):
        hf_to_open_clip({"stray": torch.zeros(1)}, num_layers=0)


# ----------------------------------------------------------------------------------------------- T5


def tiny_t5(feed_forward: str = "gated-gelu", per_layer: bool = False) -> T5Config:
    return T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=3, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=6,
        feed_forward=feed_forward, per_layer_relative_bias=per_layer,
    )  # fmt: skip


def hf_t5(c: T5Config, seed: int) -> nn.Module:
    kwargs = dict(
        vocab_size=c.vocab_size, d_model=c.d_model, d_kv=c.d_kv, d_ff=c.d_ff, num_layers=c.num_layers,
        num_heads=c.num_heads, relative_attention_num_buckets=c.relative_attention_num_buckets,
        relative_attention_max_distance=c.relative_attention_max_distance, feed_forward_proj=c.feed_forward,
        attn_implementation="eager",
    )  # fmt: skip
    if c.per_layer_relative_bias:
        return randomize(transformers.UMT5EncoderModel(transformers.UMT5Config(**kwargs)), seed)
    return randomize(transformers.T5EncoderModel(transformers.T5Config(**kwargs)), seed)


@pytest.mark.parametrize(
    ("feed_forward", "per_layer"), [("gated-gelu", False), ("relu", False), ("gated-gelu", True)]
)
def test_t5_parity(feed_forward: str, per_layer: bool) -> None:
    cfg = tiny_t5(feed_forward, per_layer)
    ref = hf_t5(cfg, seed=5)
    model = T5Encoder(cfg)
    model.load_state_dict(ref.state_dict(), strict=True)  # holds the tied encoder.embed_tokens alias
    ids = token_ids()  # 12 tokens, max_distance 6: exact, logarithmic and clipped buckets all occur
    for mask in (None, PADDING_MASK):
        with torch.no_grad():
            ours, r = model(ids, mask), ref(ids, attention_mask=mask).last_hidden_state
        assert rel_err(ours, r) <= TOL
    bias_keys = [k for k in model.state_dict() if "relative_attention_bias" in k]
    assert len(bias_keys) == (cfg.num_layers if per_layer else 1)


def test_t5_fp16_keeps_large_activations_finite() -> None:
    cfg = tiny_t5()
    ref = hf_t5(cfg, seed=6)
    with torch.no_grad():
        for block in ref.encoder.block:
            block.layer[1].DenseReluDense.wo.weight.mul_(40000.0)  # XXL-like huge feed-forward outputs
    model = T5Encoder(cfg)
    model.load_state_dict(ref.state_dict())
    ids = token_ids()
    with torch.no_grad():
        r = ref(ids, attention_mask=PADDING_MASK, output_hidden_states=True)
        assert max(h.abs().max() for h in r.hidden_states) > 2 * torch.finfo(torch.float16).max
        ours = model.half()(ids, PADDING_MASK)
    assert ours.dtype == torch.float16 and torch.isfinite(ours).all()
    assert rel_err(ours, r.last_hidden_state) < 2e-2


def test_t5_alias_keys() -> None:
    cfg = tiny_t5()
    state = dict(hf_t5(cfg, seed=7).state_dict())
    only_alias = {k: v for k, v in state.items() if k != "shared.weight"}
    model = T5Encoder(cfg)
    model.load_state_dict(only_alias, strict=True)
    assert torch.equal(model.shared.weight, state["encoder.embed_tokens.weight"])
    state["encoder.embed_tokens.weight"] = torch.zeros(VOCAB, 16)
    with pytest.raises(ModelMismatchError, match="embed_tokens"):
        model.load_state_dict(state)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        model.load_state_dict({**only_alias, "encoder.block.0.layer.0.SelfAttention.stray": torch.zeros(1)})


# --------------------------------------------------------------------------------------- full sizes

# Tensor counts of the transformers-layout files: CLIP-L 196 (openai/clip-vit-large-patch14's text tower;
# SD1 checkpoints add the position_ids buffer: 197), CLIP-H 389 and CLIP-G 517 with their projection,
# T5-XXL 219 and UMT5-XXL 242 as transformers' safetensors exports hold them (the tied
# encoder.embed_tokens copy is dropped on save; .bin dumps keep it: one more).
FULL_SIZES = [  # (id, ours on the meta device, tensors, keys only transformers' module has)
    ("clip-l", lambda: CLIPTextModel(CLIPTextConfig.clip_l(), device="meta"), 196, set()),
    ("clip-h", lambda: CLIPTextModel(CLIPTextConfig.clip_h(), device="meta"), 389, set()),
    ("clip-g", lambda: CLIPTextModel(CLIPTextConfig.clip_g(), device="meta"), 517, set()),
    ("t5-xxl", lambda: T5Encoder(T5Config.t5_xxl(), device="meta"), 219, {"encoder.embed_tokens.weight"}),
    ("t5-base", lambda: T5Encoder(T5Config.t5_base(), device="meta"), 99, {"encoder.embed_tokens.weight"}),
    ("umt5-xxl", lambda: T5Encoder(T5Config.umt5_xxl(), device="meta"), 242, {"encoder.embed_tokens.weight"}),
]


def hf_twin_shapes(name: str, model: nn.Module) -> dict[str, tuple[int, ...]]:
    """Key -> shape of the transformers model of the same config, built on the meta device."""
    c = model.config
    with torch.device("meta"):
        twin: nn.Module
        if name == "clip-l":
            twin = transformers.CLIPTextModel(hf_clip_config(c))
        elif name.startswith("clip"):
            twin = transformers.CLIPTextModelWithProjection(hf_clip_config(c))
        else:
            kwargs = dict(
                vocab_size=c.vocab_size, d_model=c.d_model, d_kv=c.d_kv, d_ff=c.d_ff, num_layers=c.num_layers,
                num_heads=c.num_heads, feed_forward_proj=c.feed_forward,
            )  # fmt: skip
            twin = (
                transformers.UMT5EncoderModel(transformers.UMT5Config(**kwargs))
                if c.per_layer_relative_bias
                else transformers.T5EncoderModel(transformers.T5Config(**kwargs))
            )
    state = file_layout(twin.state_dict()) if name.startswith("clip") else twin.state_dict()
    return {k: tuple(v.shape) for k, v in state.items()}


@pytest.mark.parametrize(("name", "build", "tensors", "aliases"), FULL_SIZES, ids=[f[0] for f in FULL_SIZES])
def test_full_size_on_meta(name: str, build: object, tensors: int, aliases: set[str]) -> None:
    model = build()  # type: ignore[operator]
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert len(shapes) == tensors
    assert all(v.is_meta for v in model.state_dict().values())
    twin = hf_twin_shapes(name, model)
    assert twin.keys() - shapes.keys() == aliases and shapes.keys() <= twin.keys()
    assert all(twin[k] == s for k, s in shapes.items())
    config_type = CLIPTextConfig if name.startswith("clip") else T5Config
    assert config_type.from_shapes(shapes) == model.config


def test_from_shapes_refuses_other_layouts() -> None:
    t5_shapes = {k: tuple(v.shape) for k, v in T5Encoder(tiny_t5(), device="meta").state_dict().items()}
    with pytest.raises(ModelMismatchError, match="transformers layout"):
        CLIPTextConfig.from_shapes(t5_shapes)
    clip = CLIPTextModel(tiny_clip("gelu", 24), device="meta").state_dict()
    with pytest.raises(ModelMismatchError, match="T5 encoder"):
        T5Config.from_shapes({k: tuple(v.shape) for k, v in clip.items()})


def test_clip_output_is_frozen() -> None:
    out = CLIPOutput(torch.zeros(1), None, torch.zeros(1), None)
    with pytest.raises(AttributeError):
        out.pooled = torch.ones(1)  # type: ignore[misc]
