"""The words a session's events and errors use (shared by its parts)."""

from __future__ import annotations

from core.errors import LoadoutError

#: a memory-manager event kind, as the event list says it
MEMORY_WORDS = {
    "load": "placed",
    "partial_load": "partly placed",
    "unload": "offloaded",
    "partial_unload": "partly offloaded",
    "keep": "kept",
    "refuse": "refused",
    "interrupt": "stopped",
    "dtype": "dtypes of",
}


def kind_word(role: str, family: str) -> str:
    if role == "diffusion_model":
        return "diffusion model"
    return "VAE" if role == "vae" else f"{role.replace('_', ' ')} {family}"


def no_model() -> LoadoutError:
    return LoadoutError(
        "no model is loaded",
        why="LoRAs and test runs work on a loaded checkpoint or diffusion model",
        fix="Load a checkpoint or diffusion model first",
        code="no_model",
    )


def not_loaded() -> LoadoutError:
    return LoadoutError("that model is no longer loaded", fix="Pick one in Loaded models", code="not_loaded")
