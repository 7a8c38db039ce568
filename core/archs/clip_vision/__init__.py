"""CLIP's vision tower (kind ``image_encoder``, families ``clip-vit-h``, ``clip-vit-bigg``,
``clip-vit-l``): the network (``network.py``), open_clip's key map (``keys.py``) and ComfyUI's
preprocessing (``preprocess.py``), with the record the catalog reads (``layout.py``)."""

from core.archs.clip_vision.layout import CLIP_VISION

#: read by ``core.archs.catalog``
IMAGE_ENCODER = CLIP_VISION

__all__ = ["CLIP_VISION", "IMAGE_ENCODER"]
