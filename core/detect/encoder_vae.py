"""Shape rules for VAEs: 2-D KL autoencoders (ldm/BFL and diffusers layouts) and Wan's 3-D VAE.

The latent channel count decides the family: the decoder's first convolution takes the latent
(``decoder.conv_in.weight`` shape[1]: 4 for SD1/SD2/SDXL, 16 for Flux and SD3). Shapes cannot tell
SD1, SD2 and SDXL VAEs apart, nor Flux's from SD3's: the match says so in ``fields["ambiguous_with"]``
and the caller applies file-name and metadata hints.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.detect.keyview import KeyView
from core.detect.registry import Match


@dataclass(frozen=True)
class KlSpec:
    id: str
    title: str
    latent_channels: int
    used_by: tuple[str, ...]
    ambiguous_with: tuple[str, ...] = ()
    warning: str = ""


@dataclass(frozen=True)
class KlFacts:
    layout: str  # "original" | "diffusers"
    latent: int
    levels: int
    base_channels: int | None
    channel_mult: tuple[int, ...]
    quant_conv: bool
    has_encoder: bool
    has_decoder: bool


# (layout, encoder level prefix, decoder level prefix, first resnet conv under a level)
_KL_LAYOUTS = (
    ("original", "encoder.down.", "decoder.up.", "block.0.conv1.weight"),
    ("diffusers", "encoder.down_blocks.", "decoder.up_blocks.", "resnets.0.conv1.weight"),
)


def read_kl(view: KeyView) -> KlFacts | None:
    """Facts of a 2-D KL autoencoder, or None (a VQ model, a 3-D video VAE, or no VAE at all)."""
    if "quantize.embedding.weight" in view:  # VQ-GAN: a codebook, not a KL latent
        return None
    for layout, enc, dec, conv1 in _KL_LAYOUTS:
        has_enc, has_dec = f"{enc}0.{conv1}" in view, f"{dec}0.{conv1}" in view
        if not (has_enc or has_dec):
            continue
        conv_in = view.shape("decoder.conv_in.weight")
        conv_out = view.shape("encoder.conv_out.weight")
        if conv_in is not None and len(conv_in) == 4:
            latent = conv_in[1]
        elif conv_in is None and conv_out is not None and len(conv_out) == 4:
            latent = conv_out[0] // 2  # the encoder emits mean and log-variance
        else:
            return None
        levels = view.count_blocks(enc) if has_enc else view.count_blocks(dec)
        base = view.dim("encoder.conv_in.weight", 0) or view.dim("decoder.conv_out.weight", 1)
        mult: list[int] = []
        if has_enc and base:
            for i in range(levels):
                width = view.dim(f"{enc}{i}.{conv1}", 0)
                mult.append(width // base if width else 0)
        return KlFacts(
            layout=layout,
            latent=latent,
            levels=levels,
            base_channels=base,
            channel_mult=tuple(mult),
            quant_conv="post_quant_conv.weight" in view or "quant_conv.weight" in view,
            has_encoder=has_enc,
            has_decoder=has_dec,
        )
    return None


def match_kl(spec: KlSpec, view: KeyView) -> Match | None:
    facts = read_kl(view)
    if facts is None or facts.latent != spec.latent_channels:
        return None
    downscale = 2 ** (facts.levels - 1) if facts.levels > 0 else None
    warnings: list[str] = []
    score = 1.0
    if spec.warning:
        warnings.append(spec.warning)
    if downscale != 8:
        warnings.append(f"downscales images by {downscale}, not 8: not the usual {spec.title}")
        score = 0.5
    if not facts.has_encoder:
        warnings.append("decoder only: it can turn latents into images but cannot encode images")
    elif not facts.has_decoder:
        warnings.append("encoder only: it can encode images but cannot decode latents")
    fields: dict[str, object] = {
        "latent_channels": facts.latent,
        "downscale": downscale,
        "base_channels": facts.base_channels,
        "channel_mult": list(facts.channel_mult),
        "quant_conv": facts.quant_conv,
        "has_encoder": facts.has_encoder,
        "has_decoder": facts.has_decoder,
        "used_by": list(spec.used_by),
    }
    if spec.ambiguous_with:
        fields["ambiguous_with"] = list(spec.ambiguous_with)
    return Match(spec.id, layout=facts.layout, fields=fields, warnings=tuple(warnings), score=score)


# Wan -------------------------------------------------------------------------------------------

# (layout, marker key, keys that give the latent channels as (key, axis, divisor))
_WAN_LAYOUTS: tuple[tuple[str, str, tuple[tuple[str, int, int], ...]], ...] = (
    (
        "original",
        "decoder.middle.0.residual.0.gamma",
        (("conv2.weight", 0, 1), ("decoder.conv1.weight", 1, 1), ("encoder.head.2.weight", 0, 2)),
    ),
    (
        "diffusers",
        "decoder.mid_block.resnets.0.norm1.gamma",
        (
            ("post_quant_conv.weight", 0, 1),
            ("decoder.conv_in.weight", 1, 1),
            ("encoder.conv_out.weight", 0, 2),
        ),
    ),
)
_WAN_VARIANTS = {
    16: ("wan2.1", ("wan2.1", "wan2.2", "qwen-image")),
    48: ("wan2.2", ("wan2.2",)),
}
_WAN_IN = {"original": "encoder.conv1.weight", "diffusers": "encoder.conv_in.weight"}


def match_wan_vae(view: KeyView) -> Match | None:
    """Wan's causal 3-D VAE: 2.1 (16 latent channels) or 2.2 (48, 2x2-patchified RGB)."""
    for layout, marker, latent_keys in _WAN_LAYOUTS:
        if marker not in view:
            continue
        latent = None
        for key, axis, div in latent_keys:
            d = view.dim(key, axis)
            if d is not None:
                latent = d // div
                break
        if latent is None:
            return None
        rgb = view.dim(_WAN_IN[layout], 1)
        patch = {3: 1, 12: 2}.get(rgb) if rgb is not None else None
        variant, used_by = _WAN_VARIANTS.get(latent, (None, ("wan2.1", "wan2.2")))
        fields: dict[str, object] = {
            "latent_channels": latent,
            "base_channels": view.dim(_WAN_IN[layout], 0),
            "patch_size": patch,
            "used_by": list(used_by),
        }
        warnings: tuple[str, ...] = ()
        # 16 channels: Wan 2.1's, Qwen-Image's and Anima's VAE (one network, one latent format:
        # ``used_by`` says whose; which weights these are makes no difference to loading them)
        if variant is None:
            warnings = (f"{latent} latent channels: neither the Wan 2.1 (16) nor the Wan 2.2 (48) VAE",)
        return Match(
            "vae-wan",
            layout=layout,
            variant=variant,
            fields=fields,
            warnings=warnings,
            score=1.0 if variant else 0.5,
        )
    return None
