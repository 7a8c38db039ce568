"""CLIP's byte-level BPE tokenizer (CLIP-L, OpenCLIP-H and -G share it), on the ``tokenizers`` library.

Which text clean-up ComfyUI's images depend on: ComfyUI tokenizes with transformers'
``CLIPTokenizer``; with transformers 5 (what ``transformers>=4.50.3`` installs today) and with every
``CLIPTokenizerFast`` that is a ``tokenizers`` pipeline: Unicode NFC, runs of whitespace to one
space, lower case, CLIP's word pattern, byte-level symbols, BPE with the ``</w>`` end-of-word mark.
``cleaning="comfyui"`` (the default) is exactly that pipeline. open_clip's own tokenizer cleans first
with ftfy (curly quotes to straight ones, full-width letters to ASCII, mojibake repaired, ligatures
split) and HTML unescaping (``&amp;`` -> ``&``): ``cleaning="open_clip"`` does the same, for the
prompts where the two differ (listed in docs/text.md). Both read the same vocabulary.
"""

from __future__ import annotations

import html
from typing import Final, Literal

from tokenizers import AddedToken, Regex, Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import BPE

from core.errors import LoadoutError
from core.text.vocab import END_ID, END_OF_TEXT, START_ID, START_OF_TEXT, ClipVocabulary, load_vocabulary

TextCleaning = Literal["comfyui", "open_clip"]

#: CLIP's word pattern (OpenAI's): special tokens, English contractions, letter runs, single
#: digits, runs of anything else that is not whitespace
WORD_PATTERN: Final = r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
#: the marker spellings each tokenizer's pattern keeps whole (open_clip renamed them)
_MARKERS: Final = {
    "comfyui": r"<\|startoftext\|>|<\|endoftext\|>|",
    "open_clip": r"<start_of_text>|<end_of_text>|",
}


def _open_clip_clean(text: str) -> str:
    try:
        import ftfy
    except ImportError as exc:  # pragma: no cover - ftfy is a dependency
        raise LoadoutError(
            "open_clip's text cleaning needs the ftfy package",
            why="ftfy is not installed",
            fix="pip install ftfy, or use the default ComfyUI cleaning",
            code="missing_dependency",
        ) from exc
    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    return " ".join(text.split()).lower()


class ClipTokenizer:
    """Text -> CLIP token ids. ``encode`` gives the ids of the words only (no start/end tokens)."""

    start_id: Final = START_ID
    end_id: Final = END_ID

    def __init__(
        self, vocabulary: ClipVocabulary | None = None, *, cleaning: TextCleaning = "comfyui"
    ) -> None:
        if cleaning not in ("comfyui", "open_clip"):
            raise ValueError(f"cleaning must be 'comfyui' or 'open_clip', not {cleaning!r}")
        vocab = vocabulary or load_vocabulary()
        self.cleaning: TextCleaning = cleaning
        self.vocabulary = vocab
        tok = Tokenizer(
            BPE(
                vocab=vocab.vocab,
                merges=vocab.merges,
                continuing_subword_prefix="",
                end_of_word_suffix="</w>",
                fuse_unk=False,
                unk_token=END_OF_TEXT,
            )
        )
        tok.normalizer = normalizers.Sequence(
            [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
        )
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(
                    Regex(_MARKERS[cleaning] + WORD_PATTERN), behavior="removed", invert=True
                ),
                pre_tokenizers.ByteLevel(add_prefix_space=False),
            ]
        )
        if cleaning == "comfyui":  # as in transformers: the markers typed in a prompt are the tokens
            markers = (START_OF_TEXT, END_OF_TEXT)
            tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in markers])
        self._tokenizer = tok

    def encode(self, text: str) -> list[int]:
        if self.cleaning == "open_clip":
            text = _open_clip_clean(text)
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids

    def token_text(self, token_id: int) -> str:
        """The vocabulary entry of one id (for showing tokens to a user)."""
        return self._tokenizer.id_to_token(token_id) or ""
