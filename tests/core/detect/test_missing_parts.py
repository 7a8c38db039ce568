"""What a loaded diffusion model still needs to generate comes from its family's record: its text
encoders and a VAE, less what is loaded (a checkpoint's own parts or separate files)."""

from __future__ import annotations

from core.archs.catalog import missing_parts
from core.detect.catalog import REGISTRY


def _spec(family: str):  # type: ignore[no-untyped-def]
    fam = REGISTRY.get(family)
    assert fam is not None and fam.diffusion is not None
    return fam.diffusion


def test_a_diffusion_model_alone_needs_its_records_text_encoders_and_vae() -> None:
    for family in ("z-image", "lumina2", "flux-dev"):
        spec = _spec(family)
        want = (*(("text_encoder", e) for e in spec.text_encoders), ("vae", spec.vae))
        assert missing_parts(family, {("diffusion_model", family)}) == want
    assert _spec("z-image").text_encoders == ("qwen3-4b",)
    assert _spec("lumina2").text_encoders == ("gemma2-2b",)


def test_what_is_loaded_is_not_asked_for_and_any_vae_serves() -> None:
    loaded = {("diffusion_model", "z-image"), ("text_encoder", "qwen3-4b")}
    assert missing_parts("z-image", loaded) == (("vae", "vae-flux"),)
    assert missing_parts("z-image", loaded | {("vae", "vae-sd3")}) == ()
    flux = {("diffusion_model", "flux-dev"), ("text_encoder", "t5-xxl"), ("vae", "vae-flux")}
    assert missing_parts("flux-dev", flux) == (("text_encoder", "clip-l"),)
    sd1 = {("diffusion_model", "sd1"), ("text_encoder", "clip-l"), ("vae", "vae-sd")}  # a checkpoint
    assert missing_parts("sd1", sd1) == ()
    # a Qwen3 of another size is not the one Z-Image's record names
    assert missing_parts("z-image", {("text_encoder", "qwen3-8b"), ("vae", "vae-flux")}) == (
        ("text_encoder", "qwen3-4b"),
    )


def test_nothing_is_asked_for_a_family_that_cannot_generate() -> None:
    assert missing_parts(None, ()) == () and missing_parts("not-a-family", ()) == ()


def test_sd3_is_not_asked_for_a_t5_once_its_clips_are_loaded() -> None:
    """SD3's prompt encoding can do without any one of its towers (ComfyUI's sd3_clip: a missing
    T5 is left out of the context); with none of them loaded, all three are asked for."""
    vae = ("vae", "vae-sd3")
    clips = {("diffusion_model", "sd3"), ("text_encoder", "clip-l"), ("text_encoder", "clip-g"), vae}
    assert missing_parts("sd3", clips) == ()
    assert missing_parts("sd3.5-large", clips) == ()
    assert missing_parts("sd3", {("diffusion_model", "sd3"), vae}) == (
        ("text_encoder", "clip-l"), ("text_encoder", "clip-g"), ("text_encoder", "t5-xxl"),
    )  # fmt: skip
    # a T5 file read as t5-base stands in for T5-XXL (the tower's ``also``)
    t5_only = {("diffusion_model", "sd3"), ("text_encoder", "t5-base"), vae}
    assert missing_parts("sd3", t5_only) == ()
