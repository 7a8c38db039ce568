"""The image-prompt passes of one generation (IP-Adapter, FLUX Redux), made from the session's
cache: each file read and loaded once, the encoder each needs found by one search, the models no
longer used released (their placement follows the passes' contributions)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from core.generate.image_prompts import EncoderSearch, ImagePromptCache, ip_adapter_pass
from core.generate.passes import Pass
from core.generate.redux_session import redux_pass
from core.generate.request import ImageSettings
from core.sampling.model_sampling import ModelSampling
from core.session.session import Session


def image_prompt_passes(
    session: Session, cache: ImagePromptCache, search: EncoderSearch, settings: ImageSettings,
    family: str, names: dict[str, str], sampling: ModelSampling, check: Callable[[], None],
    named: Callable[[Path, int], str],
) -> list[Pass]:  # fmt: skip
    """The IP-Adapter and Redux passes of ``settings`` (read and loaded, not placed); ``names`` gets
    their models' manager names."""
    prompts, _, found = ip_adapter_pass(session, cache, settings, search, family, sampling, check, named)
    names.update(found)
    redux = redux_pass(session, cache, settings, search, family, names, check, lambda p: named(p, 10))
    prompted: list[Pass] = [m for m in (prompts, redux) if m is not None]
    used = {Path(f).resolve() for m in prompted for f in m.contribution.files}
    for gone in cache.keep_only(used):
        session.placement.release(gone)
    return prompted
