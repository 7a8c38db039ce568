"""The command line's words for engine errors: core names inputs and values ("a starting image",
"applied anyway (forced)"); this table adds the flag that gives them, by error code and by the
engine's words, so a core message never names a flag (tests/core/test_engine_words.py)."""

from __future__ import annotations

from core.errors import LoadoutError

#: engine words -> the flag that gives that input on the command line
FLAGS = {
    "starting image": "--init",
    "(forced)": "--force",
    "as the VAE": "--vae",
    "as a text encoder": "--text-encoder",
    "a diffusion model with its text encoders and VAE": "--diffusion-model, --text-encoder and --vae",
    "separate diffusion model": "--diffusion-model",
    "mask picture": "--mask",
    "as the refiner": "--refiner",
    "as the device": "--device",
    "an output dtype": "--dtype",
    "strict LoRA matching": "--strict",
    "Add a LoRA file": "--lora FILE",
    "LoRA file to merge": "--lora FILE",
    "x, y and z axes": "--x, --y and --z",
    "inspection report in JSON": "loadout inspect --json",
    "check report in JSON": "loadout check --json",
    "cluster's head node": "ray start --head",
    "without its dependencies": "pip install --no-deps",
    "at batch 1 fits": "--size WxH and --batch 1",
}


def cli_message(exc: LoadoutError) -> str:
    """``exc``'s message with the flags that give the inputs it names."""
    return cli_words(exc.message)


def cli_words(message: str) -> str:
    """``message`` (an error's or a note's) with the flags that give the inputs it names."""
    flags = list(dict.fromkeys(flag for words, flag in FLAGS.items() if words in message))
    return f"{message} (on the command line: {', '.join(flags)})" if flags else message
