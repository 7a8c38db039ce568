"""Qwen-Image's prompt encoding, as ComfyUI's ``text_encoders/qwen_image`` does it: Qwen2.5-VL-7B's
text model on the prompt in Qwen-Image's chat template (its system prompt asks for the picture's
colours, shapes, sizes, textures, quantities, text and layout), the last hidden state with the
template's system part dropped (everything through ``<|im_start|>user\\n``: the prompt and the
closing ``<|im_end|>\\n<|im_start|>assistant\\n`` stay), its mask, no pooled vector. The tower's facts
are the record ``QWEN_IMAGE_TOWER`` of ``core.archs.llm.towers``."""

from __future__ import annotations

from collections.abc import Mapping

from core.archs.llm.towers import QWEN_IMAGE_EDIT_2508_TOWER, QWEN_IMAGE_EDIT_TOWER, QWEN_IMAGE_TOWER
from core.archs.protocols import TextConvention, TextOutput, TowerOutput
from core.archs.text_base import Convention


def _llm(outputs: Mapping[str, TowerOutput]) -> TextOutput:
    out = next(iter(outputs.values()))
    return TextOutput(out.hidden, None, out.mask)


QWEN_IMAGE = Convention("qwen_image", (QWEN_IMAGE_TOWER,), combine_outputs=_llm)
#: Qwen-Image-Edit's (ComfyUI's ``TextEncodeQwenImageEditPlus``): the edit template, up to three
#: pictures before the prompt, read by the encoder's vision tower (``QWEN_IMAGE_EDIT_TOWER``)
QWEN_IMAGE_EDIT = Convention("qwen_image_edit", (QWEN_IMAGE_EDIT_TOWER,), combine_outputs=_llm, pictures=True)
#: the original Qwen-Image-Edit's (August 2025; ComfyUI's ``TextEncodeQwenImageEdit``): the same
#: template, one picture right after ``user\n`` without "Picture 1:", read at 1024 x 1024 px of area;
#: without a picture Qwen-Image's own template (``QWEN_IMAGE_EDIT_2508_TOWER``)
QWEN_IMAGE_EDIT_2508 = Convention(
    "qwen_image_edit_2508", (QWEN_IMAGE_EDIT_2508_TOWER,), combine_outputs=_llm, pictures=True
)
CONVENTIONS: tuple[TextConvention, ...] = (QWEN_IMAGE, QWEN_IMAGE_EDIT, QWEN_IMAGE_EDIT_2508)
