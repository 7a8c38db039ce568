"""Qwen-Image-Edit's reference pictures, as ComfyUI's ``TextEncodeQwenImageEditPlus`` (2509, 2511)
and ``TextEncodeQwenImageEdit`` (the original) make them
for the VAE: up to three, each scaled to 1024 x 1024 pixels of area with its aspect ratio, sides
rounded to multiples of 8, "area" resampling. (The same node scales each picture to 384 x 384 of
area for the vision tower: that is the prompt encoding's own, from the pictures as read.)"""

from __future__ import annotations

from core.archs.references import TotalArea

QWEN_EDIT_REFERENCES = TotalArea("qwen-edit", area=1024 * 1024, most=3, step=8, method="area")
#: the original Edit's (``TextEncodeQwenImageEdit``): one picture at 1024 x 1024 px of area, its
#: sides rounded to whole pixels (the VAE then crops them to multiples of 8 around the centre); the
#: vision tower reads the same scaled picture
QWEN_EDIT_2508_REFERENCES = TotalArea("qwen-edit-2508", area=1024 * 1024, most=1, step=1, method="area")
REFERENCES = (QWEN_EDIT_REFERENCES, QWEN_EDIT_2508_REFERENCES)
