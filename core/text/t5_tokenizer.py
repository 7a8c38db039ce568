"""T5's SentencePiece tokenizer (SD3, Flux, Chroma), found on the user's disk.

Loadout ships no T5 vocabulary. It looks, in order, at: a path the caller gives (a setting), the
``LOADOUT_T5_TOKENIZER`` environment variable, each ComfyUI install's
``comfy/text_encoders/t5_tokenizer/`` (``tokenizer.json``: what ComfyUI's own ``T5TokenizerFast``
reads), each Forge install's ``backend/huggingface/black-forest-labs/FLUX.1-*/tokenizer_2/``, and the
Hugging Face cache (``google/t5-v1_1-xxl``, FLUX.1's ``tokenizer_2``, SD3's ``tokenizer_3``). A folder
counts when it holds ``tokenizer.json`` (read with ``tokenizers``) or ``spiece.model`` (read with
``sentencepiece``). When none is found the error lists every place looked at and where to put one.

ComfyUI facts followed: ids of the text without the end token (the windowing adds it), ``</s>`` = 1,
``<pad>`` = 0.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from core.errors import LoadoutError

ENV_VAR: Final = "LOADOUT_T5_TOKENIZER"
END_ID: Final = 1
PAD_ID: Final = 0
COMFYUI_SUBDIR: Final = Path("comfy/text_encoders/t5_tokenizer")
_FORGE_BFL: Final = Path("backend/huggingface/black-forest-labs")
FORGE_SUBDIRS: Final = (_FORGE_BFL / "FLUX.1-dev/tokenizer_2", _FORGE_BFL / "FLUX.1-schnell/tokenizer_2")
#: (Hugging Face repo, folder inside a snapshot)
HF_REPOS: Final = (
    ("google/t5-v1_1-xxl", ""),
    ("black-forest-labs/FLUX.1-dev", "tokenizer_2"),
    ("black-forest-labs/FLUX.1-schnell", "tokenizer_2"),
    ("stabilityai/stable-diffusion-3-medium-diffusers", "tokenizer_3"),
    ("stabilityai/stable-diffusion-3.5-large", "tokenizer_3"),
    ("stabilityai/stable-diffusion-3.5-medium", "tokenizer_3"),
)


class T5TokenizerMissing(LoadoutError):
    code = "tokenizer_missing"


class _Backend(Protocol):
    def __call__(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class T5TokenizerSearch:
    """Where to look for a T5 tokenizer. ``hf_cache`` None: the standard cache location (from
    ``HF_HUB_CACHE`` / ``HF_HOME`` / ``~/.cache/huggingface/hub``). ``environ`` None: ``os.environ``."""

    explicit: Path | None = None
    comfyui_installs: tuple[Path, ...] = ()
    forge_installs: tuple[Path, ...] = ()
    hf_cache: Path | None = None
    environ: Mapping[str, str] | None = field(default=None, compare=False)

    def _env(self) -> Mapping[str, str]:
        return os.environ if self.environ is None else self.environ

    def cache_dir(self) -> Path:
        if self.hf_cache is not None:
            return self.hf_cache
        env = self._env()
        if env.get("HF_HUB_CACHE"):
            return Path(env["HF_HUB_CACHE"]).expanduser()
        if env.get("HF_HOME"):
            return Path(env["HF_HOME"]).expanduser() / "hub"
        return Path("~/.cache/huggingface/hub").expanduser()

    def places(self) -> list[Path]:
        """Every folder (or file) looked at, in order."""
        places: list[Path] = []
        if self.explicit is not None:
            places.append(self.explicit.expanduser())
        if self._env().get(ENV_VAR):
            places.append(Path(self._env()[ENV_VAR]).expanduser())
        places += [root / COMFYUI_SUBDIR for root in self.comfyui_installs]
        places += [root / sub for root in self.forge_installs for sub in FORGE_SUBDIRS]
        cache = self.cache_dir()
        for repo, sub in HF_REPOS:
            snapshots = cache / ("models--" + repo.replace("/", "--")) / "snapshots"
            found = sorted(snapshots.iterdir(), reverse=True) if snapshots.is_dir() else [snapshots / "*"]
            places += [(snap / sub) if sub else snap for snap in found]
        return places


def _tokenizer_file(place: Path) -> Path | None:
    if place.is_file() and place.name in ("tokenizer.json", "spiece.model"):
        return place
    for name in ("tokenizer.json", "spiece.model"):
        if (place / name).is_file():
            return place / name
    return None


def find_t5_tokenizer(search: T5TokenizerSearch) -> Path:
    """The first ``tokenizer.json`` / ``spiece.model`` found, or a LoadoutError naming the places."""
    places = search.places()
    for place in places:
        if (path := _tokenizer_file(place)) is not None:
            return path
    listed = "; ".join(str(p) for p in places)
    raise T5TokenizerMissing(
        "No T5 tokenizer was found (SD3, Flux and Chroma prompts need one)",
        why=f"looked in: {listed}",
        fix=(
            "point the T5 tokenizer setting (or the LOADOUT_T5_TOKENIZER variable) at a folder holding "
            "tokenizer.json or spiece.model: ComfyUI's comfy/text_encoders/t5_tokenizer/ or the "
            "tokenizer_2/ folder of black-forest-labs/FLUX.1-dev from Hugging Face"
        ),
    )


class T5Tokenizer:
    """Text -> T5 ids (no end token). Built from a ``tokenizer.json`` or a ``spiece.model``."""

    end_id: Final = END_ID
    pad_id: Final = PAD_ID

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._encode, specials = _load(path)
        except LoadoutError:
            raise
        except Exception as exc:  # sentencepiece/tokenizers raise plain RuntimeErrors on bad files
            raise T5TokenizerMissing(
                f"{path} is not a readable T5 tokenizer",
                why=str(exc) or type(exc).__name__,
                fix="use ComfyUI's comfy/text_encoders/t5_tokenizer/ folder or a FLUX.1 tokenizer_2/ folder",
            ) from exc
        if specials != (PAD_ID, END_ID):
            raise T5TokenizerMissing(
                f"{path} is not a T5 tokenizer",
                why=f"its <pad> and </s> ids are {specials}, T5's are (0, 1)",
                fix="use the tokenizer of google/t5-v1_1-xxl (ComfyUI's t5_tokenizer folder)",
            )

    @classmethod
    def find(cls, search: T5TokenizerSearch) -> T5Tokenizer:
        return cls(find_t5_tokenizer(search))

    def encode(self, text: str) -> list[int]:
        return self._encode(text)


def _load(path: Path) -> tuple[_Backend, tuple[int | None, int | None]]:
    if path.name == "spiece.model" or path.suffix == ".model":
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=str(path))

        def encode_sp(text: str) -> list[int]:
            ids: list[int] = sp.encode(text)
            return ids

        return encode_sp, (sp.piece_to_id("<pad>"), sp.piece_to_id("</s>"))
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))

    def encode_json(text: str) -> list[int]:
        ids: list[int] = tok.encode(text, add_special_tokens=False).ids
        return ids

    return encode_json, (tok.token_to_id("<pad>"), tok.token_to_id("</s>"))


def installs_from_origins(origins: Iterable[str]) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """(ComfyUI installs, A1111/Forge installs) named by library root origins such as
    ``"comfyui:/home/me/ComfyUI"`` (core.library.sources)."""
    comfy: dict[Path, None] = {}
    forge: dict[Path, None] = {}
    for origin in origins:
        kind, _, where = origin.partition(":")
        if kind == "comfyui" and where:
            comfy[Path(where)] = None
        elif kind == "a1111" and where:
            forge[Path(where)] = None
    return tuple(comfy), tuple(forge)
