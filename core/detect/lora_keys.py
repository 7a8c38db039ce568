"""How adapter files name their tensors: factor suffixes, naming schemes, and kohya names as paths.

A key is ``<module name><factor suffix>``: ``lora_unet_input_blocks_4_1_proj_in.lora_down.weight``,
``transformer.single_transformer_blocks.0.attn.to_q.lora_A.weight``, ``lycoris_to_q.hada_w1_a``.
This module splits keys into (module name, canonical part) and says, for a module name, which
naming scheme it follows, which component it patches and the dotted path inside that component.

Canonical parts: ``down``, ``up``, ``mid``, ``up_bias``, ``alpha``, ``dora_scale``, ``diff``,
``diff_b``, ``set_weight``, ``hada_*``, ``lokr_*``, ``a1/a2/b1/b2``, ``oft_blocks``, ``oft_diag``,
``rescale``, ``w_norm``, ``b_norm``, ``ia3_weight``, ``on_input``, ``reshape_weight``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

#: (suffix, part), longest first so ``.lora_A.default.weight`` wins over shorter forms.
_SUFFIXES: tuple[tuple[str, str], ...] = tuple(
    sorted(
        (
            (".lora_down.weight", "down"),
            (".lora_up.weight", "up"),
            (".lora_mid.weight", "mid"),
            (".lora_A.weight", "down"),
            (".lora_B.weight", "up"),
            (".lora_B.bias", "up_bias"),
            (".lora_A.default.weight", "down"),
            (".lora_B.default.weight", "up"),
            (".lora_A", "down"),
            (".lora_B", "up"),
            (".lora.down.weight", "down"),
            (".lora.up.weight", "up"),
            (".lora_linear_layer.down.weight", "down"),
            (".lora_linear_layer.up.weight", "up"),
            ("_lora.down.weight", "down"),
            ("_lora.up.weight", "up"),
            (".alpha", "alpha"),
            (".dora_scale", "dora_scale"),
            (".lora_magnitude_vector", "dora_scale"),  # PEFT's DoRA magnitude
            (".diff", "diff"),
            (".diff_b", "diff_b"),
            (".set_weight", "set_weight"),
            (".reshape_weight", "reshape_weight"),
            (".hada_w1_a", "hada_w1_a"),
            (".hada_w1_b", "hada_w1_b"),
            (".hada_w2_a", "hada_w2_a"),
            (".hada_w2_b", "hada_w2_b"),
            (".hada_t1", "hada_t1"),
            (".hada_t2", "hada_t2"),
            (".lokr_w1", "lokr_w1"),
            (".lokr_w1_a", "lokr_w1_a"),
            (".lokr_w1_b", "lokr_w1_b"),
            (".lokr_w2", "lokr_w2"),
            (".lokr_w2_a", "lokr_w2_a"),
            (".lokr_w2_b", "lokr_w2_b"),
            (".lokr_t2", "lokr_t2"),
            (".a1.weight", "a1"),
            (".a2.weight", "a2"),
            (".b1.weight", "b1"),
            (".b2.weight", "b2"),
            (".oft_blocks", "oft_blocks"),
            (".oft_diag", "oft_diag"),
            (".rescale", "rescale"),
            (".w_norm", "w_norm"),
            (".b_norm", "b_norm"),
            (".on_input", "on_input"),
        ),
        key=lambda item: -len(item[0]),
    )
)

#: All suffixes as one anchored pattern over the reversed key: one C-speed match per key instead of
#: a loop of ``endswith`` calls. Alternatives keep the longest-first order, so the same suffix wins;
#: ``(?=.)`` keeps the rule that a module name must precede the suffix.
_REVERSED_SUFFIXES = re.compile("|".join(f"({re.escape(sfx[::-1])})(?=.)" for sfx, _ in _SUFFIXES))

#: XLabs Flux LoRAs: ``double_blocks.0.processor.qkv_lora1.down.weight`` (1 = image, 2 = text stream).
_XLABS = re.compile(
    r"^((?:double|single)_blocks\.\d+)\.processor\.(qkv|proj)_lora([12]?)\.(down|up)\.weight$"
)

#: Naming schemes: (prefix, format, role, text encoder index, kohya-style underscored names).
_PREFIXES: tuple[tuple[str, str, str | None, int | None, bool], ...] = (
    ("lora_unet_", "kohya", "diffusion_model", None, True),
    ("lora_te1_", "kohya", "text_encoder", 1, True),
    ("lora_te2_", "kohya", "text_encoder", 2, True),
    ("lora_te3_", "kohya", "text_encoder", 3, True),
    ("lora_te_", "kohya", "text_encoder", 1, True),
    ("lycoris_", "lycoris", None, None, True),
    ("lora_transformer_", "onetrainer", "diffusion_model", None, True),
    ("base_model.model.", "peft", None, None, False),
    ("unet.", "diffusers", "diffusion_model", None, False),
    ("transformer_2.", "diffusers", "diffusion_model", None, False),
    ("transformer.", "diffusers", "diffusion_model", None, False),
    ("text_encoder_2.", "diffusers", "text_encoder", 2, False),
    ("text_encoder_3.", "diffusers", "text_encoder", 3, False),
    ("text_encoder.", "diffusers", "text_encoder", 1, False),
    ("model.diffusion_model.", "comfyui", "diffusion_model", None, False),
    ("diffusion_model.", "comfyui", "diffusion_model", None, False),
)

#: ComfyUI's names for text encoders inside ``text_encoders.<name>.``.
_COMFY_ENCODERS = {
    "clip_l": "clip-l",
    "clip_g": "clip-g",
    "clip_h": "clip-h",
    "t5xxl": "t5-xxl",
    "t5base": "t5-base",
    "umt5xxl": "umt5-xxl",
    # decoder LLMs (ComfyUI's clip names: Z-Image, Lumina 2, NewBie, Qwen-Image, FLUX.2, HiDream)
    "qwen3_06b": "qwen3-0.6b",
    "qwen3_4b": "qwen3-4b",
    "qwen3_8b": "qwen3-8b",
    "qwen25_3b": "qwen2.5-vl-3b",
    "qwen25_7b": "qwen2.5-vl-7b",
    "gemma2_2b": "gemma2-2b",
    "gemma3_4b": "gemma3-4b",
    "llama": "llama3.1-8b",
    "mistral3_24b": "mistral3-24b",
}

#: Module names that contain underscores; every other ``_`` in a kohya name was a ``.``.
_COMPOUNDS = frozenset(
    {
        # SD UNet, original and diffusers layouts
        "input_blocks", "middle_block", "output_blocks", "time_embed", "label_emb", "emb_layers",
        "in_layers", "out_layers", "skip_connection", "down_blocks", "up_blocks", "mid_block",
        "transformer_blocks", "proj_in", "proj_out", "to_q", "to_k", "to_v", "to_out", "time_emb_proj",
        "conv_shortcut", "conv_in", "conv_out", "conv_norm_out", "time_embedding", "add_embedding",
        "linear_1", "linear_2",
        # text encoders (CLIP, T5, decoder LLMs)
        "text_model", "self_attn", "q_proj", "k_proj", "v_proj", "out_proj", "final_layer_norm",
        "o_proj", "gate_proj", "up_proj", "down_proj", "embed_tokens", "input_layernorm",
        "post_attention_layernorm", "q_norm", "k_norm",
        "token_embedding", "position_embedding", "text_projection", "wi_0", "wi_1",
        "relative_attention_bias", "layer_norm",
        # Flux, HunyuanVideo
        "double_blocks", "single_blocks", "img_attn", "txt_attn", "img_mlp", "txt_mlp", "img_mod",
        "txt_mod", "img_in", "txt_in", "time_in", "vector_in", "guidance_in", "in_layer", "out_layer",
        "final_layer", "individual_token_refiner", "token_refiner",
        # SD3 / MMDiT, diffusers DiTs
        "joint_blocks", "x_block", "context_block", "adaLN_modulation", "x_embedder",
        "context_embedder", "t_embedder", "y_embedder", "pos_embed", "single_transformer_blocks",
        "joint_transformer_blocks", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
        "proj_mlp", "ff_context", "norm1_context", "norm_out", "time_text_embed", "timestep_embedder",
        "text_embedder", "guidance_embedder",
        # Wan, AuraFlow, Qwen-Image
        "cross_attn", "k_img", "v_img", "time_projection", "text_embedding", "patch_embedding",
        "img_emb", "double_layers", "single_layers", "txt_norm",
    }
)  # fmt: skip


@dataclass(frozen=True)
class NamingScheme:
    """What a module name says about itself."""

    format: str  # "kohya" | "diffusers" | "peft" | "lycoris" | "comfyui" | "onetrainer" | "xlabs" | "bare"
    role: str  # "diffusion_model" | "text_encoder"
    encoder: int | None  # text encoder index as the file numbers it (1, 2, 3)
    encoder_id: str | None  # a text encoder id when the name says it (ComfyUI ``text_encoders.clip_l``)
    path: str  # dotted path inside the component (best effort for kohya-style names)


@dataclass(frozen=True)
class KeyPart:
    """One key taken apart: the module it belongs to, the canonical part, and the factor spelling."""

    module: str
    part: str
    spelling: str | None  # "lora_down" | "lora_A" | "lora.down" | "lora_linear_layer" | "_lora" | "xlabs"


@functools.lru_cache(maxsize=1 << 17)
def split_key(key: str) -> KeyPart | None:
    """The module name and canonical part of an adapter key, or None when it is not one.

    Memoised: LoRAs of one family share their key names, so a library scan splits each name once.
    """
    m = _XLABS.match(key) if ".processor." in key else None
    if m:
        block, which, stream, factor = m.groups()
        return KeyPart(f"{block}.processor.{which}_lora{stream}", factor, "xlabs")
    m = _REVERSED_SUFFIXES.match(key[::-1])
    if m is not None and m.lastindex is not None:
        suffix, part = _SUFFIXES[m.lastindex - 1]
        return KeyPart(key[: -len(suffix)], part, _SPELLINGS.get(suffix))
    if key.endswith(".weight"):
        # An IA3 scale is a bare ``weight``; it is kept only when its module also has ``on_input``.
        return KeyPart(key[: -len(".weight")], "ia3_weight", None)
    return None


_SPELLINGS = {
    ".lora_down.weight": "lora_down",
    ".lora_up.weight": "lora_down",
    ".lora_mid.weight": "lora_down",
    ".lora_A.weight": "lora_A",
    ".lora_B.weight": "lora_A",
    ".lora_B.bias": "lora_A",
    ".lora_A.default.weight": "lora_A",
    ".lora_B.default.weight": "lora_A",
    ".lora_A": "lora_A",
    ".lora_B": "lora_A",
    ".lora.down.weight": "lora.down",
    ".lora.up.weight": "lora.down",
    ".lora_linear_layer.down.weight": "lora_linear_layer",
    ".lora_linear_layer.up.weight": "lora_linear_layer",
    "_lora.down.weight": "_lora",
    "_lora.up.weight": "_lora",
}


@functools.lru_cache(maxsize=1 << 16)
def underscored_to_path(name: str) -> str:
    """``down_blocks_0_attentions_0_proj_in`` -> ``down_blocks.0.attentions.0.proj_in``.

    kohya-style names replace every ``.`` with ``_``; the dots come back wherever the name is not
    one of the known multi-word module names. Unknown multi-word names come back split at each
    ``_``: compare ``path.replace(".", "_")`` with the model key's when an exact match matters.
    """
    tokens = name.split("_")
    out: list[str] = []
    i = 0
    while i < len(tokens):
        for width in (3, 2):
            if i + width <= len(tokens) and "_".join(tokens[i : i + width]) in _COMPOUNDS:
                out.append("_".join(tokens[i : i + width]))
                i += width
                break
        else:
            out.append(tokens[i])
            i += 1
    return ".".join(t for t in out if t)


#: diffusers' attention-processor names for CLIP's projections (``self_attn.to_q_lora``)
_TE_OLD_NAMES = {"to_q": "q_proj", "to_k": "k_proj", "to_v": "v_proj", "to_out": "out_proj"}
_PROCESSOR = ".processor."


def _old_diffusers(path: str, role: str) -> str:
    """diffusers' attention-processor LoRA names as module paths (diffusers 0.12-0.21, before PEFT).

    Its ``LoRAAttnProcessor`` held ``to_q_lora`` / ``to_k_lora`` / ``to_v_lora`` / ``to_out_lora``, saved as
    ``<attention>.processor.to_q_lora.down.weight``; later writers kept the ``processor.`` with PEFT
    factors (``processor.to_q.lora_A.weight``). The processor is not a module: ``attn1.processor.to_q``
    is ``attn1.to_q``, and its single ``to_out`` is the linear ``to_out.0``. Its text-encoder form
    (``self_attn.to_q_lora``) names CLIP's ``self_attn.q_proj``.
    """
    path = path.replace(_PROCESSOR, ".")
    head, _, last = path.rpartition(".")
    if role == "text_encoder" and last in _TE_OLD_NAMES:
        return f"{head}.{_TE_OLD_NAMES[last]}"
    return path + ".0" if last == "to_out" else path


def _is_old_diffusers(path: str, role: str, spellings: frozenset[str]) -> bool:
    """``_lora`` factors, a ``processor.`` in the name, or CLIP attention named ``self_attn.to_q``."""
    if "_lora" in spellings or _PROCESSOR in path:
        return True
    head, _, last = path.rpartition(".")
    return role == "text_encoder" and last in _TE_OLD_NAMES and head.endswith("self_attn")


def _xlabs_path(name: str) -> str:
    block, rest = name.split(".processor.")
    which, stream = rest.split("_lora")
    if block.startswith("double_blocks"):
        side = "img" if stream in ("", "1") else "txt"
        return f"{block}.{side}_attn.{which}"
    return f"{block}.{'linear1' if which == 'qkv' else 'linear2'}"


#: a decoder LLM's projections (transformers' names, with or without the ``model.`` of a
#: ``*ForCausalLM``): no diffusion network names its layers this way
_LLM_LAYER = re.compile(r"^(model\.)?layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)$")


def _role_from_path(path: str) -> str:
    head = path.split(".", 1)[0]
    if head in ("text_model", "encoder", "shared", "text_encoder") or _LLM_LAYER.match(path):
        return "text_encoder"
    return "diffusion_model"


@functools.lru_cache(maxsize=1 << 16)
def naming_scheme(name: str, spellings: frozenset[str]) -> NamingScheme:
    """The naming scheme of one module name (``spellings``: the factor spellings its keys use)."""
    if "xlabs" in spellings:
        return NamingScheme("xlabs", "diffusion_model", None, None, _xlabs_path(name))
    for prefix, fmt, role, encoder, underscored in _PREFIXES:
        if not name.startswith(prefix):
            continue
        rest = name[len(prefix) :]
        if fmt == "peft":
            inner = naming_scheme(rest, spellings)
            return NamingScheme("peft", inner.role, inner.encoder, inner.encoder_id, inner.path)
        path = underscored_to_path(rest) if underscored else rest
        role = role or _role_from_path(path)
        if _is_old_diffusers(path, role, spellings):
            path = _old_diffusers(path, role)
        return NamingScheme(fmt, role, encoder, None, path)
    if name.startswith("text_encoders."):
        enc, _, rest = name[len("text_encoders.") :].partition(".")
        return NamingScheme(
            "comfyui", "text_encoder", None, _COMFY_ENCODERS.get(enc), rest.removeprefix("transformer.")
        )
    fmt = "peft" if "lora_A" in spellings else "bare"
    role = _role_from_path(name)
    path = _old_diffusers(name, role) if _is_old_diffusers(name, role, spellings) else name
    return NamingScheme(fmt, role, None, None, path)
