"""A real byte-level BPE vocabulary trained for the tests (Llama-3's pre-tokenizer, every byte in
the alphabet), written out as the files artists have: a Hugging Face ``tokenizer.json`` (Llama-3's
shape), a Mistral ``tekken.json`` (the same tokens as base64 bytes by rank, specials first), and a
GGUF ``gpt2``-style vocabulary."""

from __future__ import annotations

import base64
import json
from functools import cache
from pathlib import Path

from core.text.llm.bpe import LLAMA3_PATTERN
from tests.core.text.llm.prompts import LONG, PROMPTS

#: Llama-3's specials' text (ids follow the trained vocabulary here, not 128000...)
LLAMA_SPECIALS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
)
#: Tekken's first special tokens in rank order (FLUX.2's template uses ranks 3, 4, 17, 18; pad is 11)
TEKKEN_SPECIALS = (
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
    "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]",
)  # fmt: skip
#: Mistral's own split pattern (tekken.json's config.pattern)
TEKKEN_FILE_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
    r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CORPUS = [
    *PROMPTS,
    LONG,
    "The quick brown fox jumps over the lazy dog. " * 20,
    "HelloWorld CamelCase 1234567",
]


@cache
def llama3_tokenizer_json() -> str:
    """A Llama-3-shaped tokenizer.json (no normalizer, Llama-3's split, byte-level, BOS template)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(  # type: ignore[assignment]
        [
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()  # type: ignore[assignment]
    trainer = trainers.BpeTrainer(
        vocab_size=900, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_special_tokens(list(LLAMA_SPECIALS))
    bos = tok.token_to_id(LLAMA_SPECIALS[0])
    tok.post_processor = processors.TemplateProcessing(  # type: ignore[assignment]
        single=f"{LLAMA_SPECIALS[0]} $A", special_tokens=[(LLAMA_SPECIALS[0], bos)]
    )
    return str(tok.to_str())


def byte_tokens() -> list[bytes]:
    """The trained vocabulary's byte tokens in id order (specials left out)."""
    table = _unicode_to_byte()
    vocab = json.loads(llama3_tokenizer_json())["model"]["vocab"]
    return [bytes(table[c] for c in tok) for tok, _ in sorted(vocab.items(), key=lambda kv: kv[1])]


def _unicode_to_byte() -> dict[str, int]:
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def tekken_json(pattern: str = TEKKEN_FILE_PATTERN, extra_vocab: int = 0) -> bytes:
    """A v7 ``tekken.json`` of the trained tokens; ``extra_vocab`` ranks past the declared
    vocabulary size (dropped by every reader)."""
    tokens = byte_tokens()
    vocab = [
        {"rank": r, "token_bytes": base64.b64encode(t).decode(), "token_str": None}
        for r, t in enumerate(tokens)
    ]
    vocab += [
        {
            "rank": len(tokens) + i,
            "token_bytes": base64.b64encode(f"zz{i}qq".encode()).decode(),
            "token_str": None,
        }
        for i in range(extra_vocab)
    ]
    specials = [{"rank": i, "token_str": s, "is_control": True} for i, s in enumerate(TEKKEN_SPECIALS)]
    config = {
        "pattern": pattern,
        "num_vocab_tokens": len(vocab),
        "default_vocab_size": len(tokens) + len(specials),
        "version": "v7",
        "default_num_special_tokens": len(specials),
    }
    return json.dumps({"config": config, "vocab": vocab, "special_tokens": specials}).encode()


def write_llama3_gguf(path: Path) -> None:
    """A GGUF whose ``tokenizer.ggml.*`` is the trained vocabulary, as llama.cpp writes Llama-3's."""
    import gguf
    import numpy as np

    data = json.loads(llama3_tokenizer_json())
    vocab: dict[str, int] = dict(data["model"]["vocab"])
    for added in data["added_tokens"]:
        vocab[added["content"]] = added["id"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    specials = {a["content"] for a in data["added_tokens"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in specials else 1 for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(vocab[LLAMA_SPECIALS[0]])
    writer.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
