"""How each family feeds a prompt through its decoder LLM, as data (ComfyUI's choices, per
``comfy/text_encoders/{z_image,lumina2,qwen_image,...}.py`` and the Lumina 2 text node; docs/text.md).

A :class:`LlmTowerSpec` is the ``options`` of a :class:`~core.archs.protocols.TowerSpec`: the chat
template the prompt is put into, which hidden state is the output, whether ``(word:1.2)`` weights
are read, the start and padding tokens, the tokenizer, and the special tokens matched in the text.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final, Literal

from core.archs.protocols import TowerSpec

TokenizerKind = Literal["qwen", "spm", "llama3", "tekken"]


@dataclass(frozen=True)
class TemplateDrop:
    """Where the encoder's output starts when the family drops its template's system part
    (ComfyUI's Qwen-Image rule): at the ``count``-th ``marker`` token (the first one if there are
    fewer), or just past it and the ``then`` tokens when they follow it and the text runs on past
    them.
    The hidden states and the mask before that position are dropped (they still condition the
    later tokens: the encoder reads the whole template)."""

    marker: int
    count: int
    then: tuple[int, ...] = ()

    def start(self, ids: list[int]) -> int:
        found = [i for i, t in enumerate(ids) if t == self.marker][: self.count]
        if not found:
            return 0
        at = found[-1]
        past = at + 1 + len(self.then)
        follows = ids[at + 1 : past] == list(self.then)
        return past if follows and len(ids) > past else at


@dataclass(frozen=True)
class PictureSpec:
    """How a family puts pictures into its prompt (Qwen-Image-Edit's, ComfyUI's
    ``TextEncodeQwenImageEditPlus``, ``TextEncodeQwenImageEdit``): the text put before the prompt
    for picture N (``prefix``, ``{}`` the 1-based number), the token that stands for a picture's
    tokens, the area each picture is scaled to first, and how many pictures a prompt takes."""

    prefix: str
    token: int
    area: int
    most: int
    #: the template read when no picture is given (ComfyUI's ``TextEncodeQwenImageEdit`` without
    #: an image: the Qwen-Image tokenizer's plain template); None: the tower's own
    bare_template: str | None = None

    def text(self, count: int) -> str:
        return "".join(self.prefix.format(i + 1) for i in range(count))


@dataclass(frozen=True)
class LlmTowerSpec:
    """One family's use of an LLM encoder.

    ``template``: the text the encoder reads, ``{}`` standing for the prompt. ``layer``: the hidden
    state taken, counted from the end as ComfyUI's ``layer_idx`` (-2: the second-to-last layer's
    output, not final-normed). ``weighted``: whether ComfyUI parses prompt weights (off for
    Z-Image). ``start``: a token put before the text (Gemma's BOS) or None. ``pad``: the padding
    token: the empty prompt weights are taken against is ``start`` then ``pad``s, and a row's mask
    ends at its first ``pad`` (ComfyUI's rule). ``special``: text that becomes one token id.
    ``stack``: several hidden states side by side instead of ``layer`` (FLUX.2's 3 layers).
    ``drop``: the template tokens dropped from the output (Qwen-Image's), or None. ``own_template``:
    a prompt that starts with one of these is read as it is, its own template (ComfyUI's Qwen-Image
    tokenizer). ``min_length``: rows shorter than this are padded with ``pad`` to it
    (FLUX.2 klein's 512); ``stack`` is in transformers' ``hidden_states`` numbering (ComfyUI's list
    of layers counts the same way)."""

    template: str = "{}"
    layer: int = -2
    weighted: bool = True
    start: int | None = None
    pad: int = 0
    tokenizer: TokenizerKind = "qwen"
    special: MappingProxyType[str, int] = field(default_factory=lambda: MappingProxyType({}))
    stack: tuple[int, ...] = ()
    drop: TemplateDrop | None = None
    own_template: tuple[str, ...] = ()
    min_length: int = 1
    kind: str = "llm"
    #: pictures in the prompt (Qwen-Image-Edit's, read by the encoder's vision tower); None: none
    pictures: PictureSpec | None = None

    def __post_init__(self) -> None:
        if self.layer >= 0:
            raise ValueError(f"layer counts from the end (-1 last, -2 penultimate), not {self.layer}")
        if self.template.count("{}") != 1:
            raise ValueError(f"a template holds the prompt once as '{{}}': {self.template!r}")

    def text(self, prompt: str) -> str:
        """The prompt put into the template (braces in the prompt are kept as typed)."""
        if self.own_template and prompt.startswith(self.own_template):
            return prompt
        before, _, after = self.template.partition("{}")
        return before + prompt + after


#: Z-Image's chat template (ComfyUI ``ZImageTokenizer.llama_template``)
Z_IMAGE_TEMPLATE: Final = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
#: Lumina 2's system prompts (ComfyUI ``CLIPTextEncodeLumina2``), put before ``<Prompt Start>``
LUMINA2_SYSTEM_PROMPTS: Final = MappingProxyType(
    {
        "superior": "You are an assistant designed to generate superior images with the superior "
        "degree of image-text alignment based on textual prompts or user prompts.",
        "alignment": "You are an assistant designed to generate high-quality images with the "
        "highest degree of image-text alignment based on textual prompts.",
    }
)
#: Qwen-Image's chat template (ComfyUI ``QwenImageTokenizer.llama_template``)
QWEN_IMAGE_TEMPLATE: Final = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
    "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
    "<|im_end|>\n<|im_start|>assistant\n"
)
QWEN_PAD: Final = 151643  # <|endoftext|>
QWEN_IM_START, QWEN_USER, QWEN_NEWLINE = 151644, 872, 198  # <|im_start|>, "user", "\n"
GEMMA_BOS, GEMMA_PAD = 2, 0

Z_IMAGE_QWEN3: Final = LlmTowerSpec(
    Z_IMAGE_TEMPLATE, layer=-2, weighted=False, pad=QWEN_PAD, tokenizer="qwen"
)

#: Qwen-Image: Qwen2.5-VL-7B's last (final-normed) hidden state, no weights (ComfyUI tokenizes with
#: them off), the system part of the template dropped through ``<|im_start|>user\n`` (34 tokens)
QWEN_IMAGE_QWEN25VL: Final = LlmTowerSpec(
    QWEN_IMAGE_TEMPLATE,
    layer=-1,
    weighted=False,
    pad=QWEN_PAD,
    tokenizer="qwen",
    drop=TemplateDrop(QWEN_IM_START, 2, (QWEN_USER, QWEN_NEWLINE)),
    own_template=("<|im_start|>", "<|start_header_id|>"),
)


#: Qwen-Image-Edit's chat template (ComfyUI ``TextEncodeQwenImageEditPlus``' ``llama_template``;
#: diffusers' ``QwenImageEditPlusPipeline`` has the same)
QWEN_IMAGE_EDIT_TEMPLATE: Final = (
    "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, "
    "objects, background), then explain how the user's text instruction should alter or modify the "
    "image. Generate a new image that meets the user's requirements while maintaining consistency "
    "with the original input where appropriate.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n"
    "<|im_start|>assistant\n"
)
QWEN_IMAGE_PAD: Final = 151655  # <|image_pad|>
#: up to three pictures, each scaled to 384 x 384 px of area before the vision tower
QWEN_EDIT_PICTURES: Final = PictureSpec(
    "Picture {}: <|vision_start|><|image_pad|><|vision_end|>", QWEN_IMAGE_PAD, 384 * 384, 3
)
#: Qwen-Image-Edit (2509, 2511): the edit template (its system part, 64 tokens, dropped by the
#: same rule), the pictures before the prompt
QWEN_IMAGE_EDIT_QWEN25VL: Final = replace(
    QWEN_IMAGE_QWEN25VL, template=QWEN_IMAGE_EDIT_TEMPLATE, pictures=QWEN_EDIT_PICTURES
)
#: the original Qwen-Image-Edit (August 2025; ComfyUI's ``TextEncodeQwenImageEdit``, the Qwen-Image
#: tokenizer's ``llama_template_images``): one picture, its tokens right after ``user\n`` with no
#: "Picture 1:" text, scaled to 1024 x 1024 px of area (unrounded sides) before the vision tower; no
#: picture: Qwen-Image's own template (34 tokens dropped instead of 64)
QWEN_EDIT_2508_PICTURES: Final = PictureSpec(
    "<|vision_start|><|image_pad|><|vision_end|>", QWEN_IMAGE_PAD, 1024 * 1024, 1, QWEN_IMAGE_TEMPLATE
)
QWEN_IMAGE_EDIT_2508_QWEN25VL: Final = replace(QWEN_IMAGE_EDIT_QWEN25VL, pictures=QWEN_EDIT_2508_PICTURES)


def lumina2_gemma2(system_prompt: str = "superior") -> LlmTowerSpec:
    """Lumina 2's Gemma-2 tower with one of :data:`LUMINA2_SYSTEM_PROMPTS` (ComfyUI's node default:
    the first, "superior")."""
    return LlmTowerSpec(
        LUMINA2_SYSTEM_PROMPTS[system_prompt] + " <Prompt Start> {}",
        layer=-2,
        weighted=True,
        start=GEMMA_BOS,
        pad=GEMMA_PAD,
        tokenizer="spm",
        special=MappingProxyType({"<end_of_turn>": 107}),
    )


LUMINA2_GEMMA2: Final = lumina2_gemma2()

#: the towers the Z-Image, Lumina 2 and Qwen-Image conventions name (their packages' ``CONVENTIONS``)
Z_IMAGE_TOWER: Final = TowerSpec("qwen3-4b", "qwen3_4b", "Qwen3 4B", Z_IMAGE_QWEN3)
LUMINA2_TOWER: Final = TowerSpec("gemma2-2b", "gemma2_2b", "Gemma 2 2B", LUMINA2_GEMMA2)
QWEN_IMAGE_TOWER: Final = TowerSpec("qwen2.5-vl-7b", "qwen25_7b", "Qwen2.5-VL 7B", QWEN_IMAGE_QWEN25VL)
QWEN_IMAGE_EDIT_TOWER: Final = TowerSpec(
    "qwen2.5-vl-7b", "qwen25_7b", "Qwen2.5-VL 7B", QWEN_IMAGE_EDIT_QWEN25VL
)
QWEN_IMAGE_EDIT_2508_TOWER: Final = TowerSpec(
    "qwen2.5-vl-7b", "qwen25_7b", "Qwen2.5-VL 7B", QWEN_IMAGE_EDIT_2508_QWEN25VL
)

#: FLUX.2 klein's chat template (ComfyUI ``KleinTokenizer.llama_template``: the assistant turn opened
#: with an empty thinking block, as transformers' template with ``enable_thinking=False``)
KLEIN_TEMPLATE: Final = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
#: the hidden states FLUX.2 klein stacks (ComfyUI ``Qwen3_4BModel(layer=[9, 18, 27])``, diffusers
#: ``hidden_states_layers=(9, 18, 27)``): the streams after 9, 18 and 27 layers
KLEIN_LAYERS: Final = (9, 18, 27)
#: ComfyUI's klein tokenizers pad every prompt to 512 tokens with ``<|endoftext|>`` (masked)
KLEIN_MIN_LENGTH: Final = 512

KLEIN_QWEN3: Final = LlmTowerSpec(
    KLEIN_TEMPLATE, weighted=False, pad=QWEN_PAD, tokenizer="qwen", stack=KLEIN_LAYERS,
    min_length=KLEIN_MIN_LENGTH,
)  # fmt: skip
#: FLUX.2 klein 4B reads Qwen3-4B, klein 9B Qwen3-8B (the same template and layers)
KLEIN_4B_TOWER: Final = TowerSpec("qwen3-4b", "qwen3_4b", "Qwen3 4B", KLEIN_QWEN3)
KLEIN_9B_TOWER: Final = TowerSpec("qwen3-8b", "qwen3_8b", "Qwen3 8B", KLEIN_QWEN3)

#: FLUX.2 dev's prompt (ComfyUI ``Flux2Tokenizer.llama_template``: Mistral's system prompt and
#: instruction markers around the prompt; the markers are Tekken special tokens)
FLUX2_DEV_TEMPLATE: Final = (
    "[SYSTEM_PROMPT]You are an AI that reasons about image descriptions. You give structured responses "
    "focusing on object relationships, object\nattribution and actions without speculation."
    "[/SYSTEM_PROMPT][INST]{}[/INST]"
)
#: the hidden states FLUX.2 dev stacks (ComfyUI ``Mistral3_24BModel``: layers 10, 20, 30)
FLUX2_DEV_LAYERS: Final = (10, 20, 30)
TEKKEN_BOS, TEKKEN_PAD = 1, 11  # <s>, <pad>
#: Mistral-Small-3 24B for FLUX.2 dev: BOS, the template, no weights (ComfyUI tokenizes with them
#: off), no padding (one prompt: nothing to pad to), three layers side by side (15360 wide)
FLUX2_DEV_MISTRAL: Final = LlmTowerSpec(
    FLUX2_DEV_TEMPLATE, weighted=False, start=TEKKEN_BOS, pad=TEKKEN_PAD, tokenizer="tekken",
    stack=FLUX2_DEV_LAYERS,
)  # fmt: skip
FLUX2_DEV_TOWER: Final = TowerSpec("mistral3-24b", "mistral3_24b", "Mistral Small 3 24B", FLUX2_DEV_MISTRAL)
