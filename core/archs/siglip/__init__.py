"""SigLIP's vision tower (so400m, patch 14, 384), the image encoder FLUX Redux reads: the network
(:mod:`.network`) and its loading and preprocessing record (``IMAGE_ENCODERS``)."""

from core.archs.image_prompts import ImageEncoderArchitecture
from core.archs.siglip.network import PREFIX, SiglipVision, SiglipVisionConfig

#: keys of the attention-pooling head the released files carry; ComfyUI never loads them
HEAD = f"{PREFIX}head."

SIGLIP_SO400M = ImageEncoderArchitecture(
    id="siglip-so400m",
    title="SigLIP so400m (patch 14, 384)",
    configure=lambda shapes: SiglipVisionConfig.from_shapes(shapes),
    build=lambda cfg, device, dtype: SiglipVision(cfg, device=device, dtype=dtype),
    ignored=lambda key: key.startswith(HEAD),
    size=384,
    mean=(0.5, 0.5, 0.5),
    std=(0.5, 0.5, 0.5),
    module_type=SiglipVision,
)

#: read by ``core.archs.catalog``
IMAGE_ENCODERS = (SIGLIP_SO400M,)

__all__ = ["IMAGE_ENCODERS", "SIGLIP_SO400M", "SiglipVision", "SiglipVisionConfig"]
