"""Which base model an adapter was trained on, from its module names and shapes alone.

The rules read what training leaves behind: the width of the text features cross-attention reads
(768 SD1, 1024 SD2, 2048 SDXL, 1280 SDXL refiner), the depth of transformer stacks (only SDXL has
more than one transformer block per attention), block names (Flux ``double_blocks``, SD3
``joint_blocks``, Wan ``blocks.N.self_attn``, PixArt ``cross_attn.kv_linear`` or diffusers'
``attn2`` beside ``adaln_single``), hidden widths (Flux 3072, SD3 1536, SD3.5 large 2432, PixArt 1152)
and the text encoders' widths (CLIP-L 768, OpenCLIP-H 1024, CLIP-G 1280, T5-XXL 4096).
Where shapes cannot separate families (Flux dev and schnell) the guess lists the alternatives, so
metadata can break the tie.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from core.detect import lora_flux2, lora_nextdit
from core.detect.lora_modules import LoraModule

FLUX_LINE = ("flux-dev", "flux-schnell", "chroma")
FLUX_TIE = "Flux dev and schnell LoRAs share key names and shapes; reported as flux-dev"
#: every released PixArt is 1152 wide; diffusers' ``adaln_single`` names it whatever the width
#: (LTX-Video, the other self + cross attention DiT, is 2048 wide and calls it ``time_embed``)
PIXART_WIDTH = 1152
PIXART_LINE = ("pixart-sigma", "pixart-alpha")
PIXART_TIE = (
    "PixArt-Σ and PixArt-α LoRAs share names and shapes where they touch the blocks; reported as pixart-sigma"
)
_PIXART_ALPHA_MARKS = ("resolution_embedder", "aspect_ratio_embedder", "csize_embedder", "ar_embedder")

_CROSS_WIDTH = {
    768: ("sd1", "SD1 CLIP-L"),
    1024: ("sd2", "SD2 OpenCLIP-H"),
    2048: ("sdxl", "SDXL CLIP-L + CLIP-G"),
    1280: ("sdxl-refiner", "SDXL refiner CLIP-G"),
}
_UNET_HEADS = {"input_blocks", "middle_block", "output_blocks", "down_blocks", "up_blocks", "mid_block"}
_SD12_ONLY = (
    "down_blocks.0.attentions.",
    "up_blocks.3.attentions.",
    "input_blocks.1.1.",
    "input_blocks.2.1.",
)
_SD12_ONLY_OUT = ("output_blocks.9.1.", "output_blocks.10.1.", "output_blocks.11.1.")
_CLIP_IDS = {768: "clip-l", 1024: "clip-h", 1280: "clip-g"}


@dataclass(frozen=True)
class BaseGuess:
    family: str | None
    evidence: str
    alternatives: tuple[str, ...] = ()  # families the shapes cannot tell apart from ``family``
    warnings: tuple[str, ...] = ()
    tie: str = ""  # the warning to give when nothing breaks the tie among ``alternatives``


def _head(m: LoraModule) -> str:
    return m.path.split(".", 1)[0]


def _index(m: LoraModule, container: str) -> int | None:
    """The block number right after ``container`` in the module's path."""
    segs = m.path.split(".")
    for i, seg in enumerate(segs[:-1]):
        if seg == container and segs[i + 1].isdigit():
            return int(segs[i + 1])
    return None


def _max_index(mods: Iterable[LoraModule], container: str) -> int:
    found = [i for m in mods if (i := _index(m, container)) is not None]
    return max(found, default=-1)


def _width(
    mods: Iterable[LoraModule], endings: tuple[str, ...], attr: str = "in_features"
) -> tuple[int | None, LoraModule | None]:
    """The most common width among modules whose path ends with one of ``endings``."""
    seen: Counter[int] = Counter()
    first: dict[int, LoraModule] = {}
    for m in mods:
        value = getattr(m, attr)
        if value is not None and m.path.endswith(endings):
            seen[value] += 1
            first.setdefault(value, m)
    if not seen:
        return None, None
    value = max(seen, key=lambda v: (seen[v], v))
    return value, first[value]


def _any(mods: Iterable[LoraModule], needles: tuple[str, ...]) -> LoraModule | None:
    for m in mods:
        if any(n in m.path for n in needles):
            return m
    return None


def encoder_widths(modules: Iterable[LoraModule]) -> dict[tuple[str, int | None, str | None], int]:
    """Hidden width per text encoder, keyed by (format, index, id)."""
    ins: dict[tuple[str, int | None, str | None], Counter[int]] = {}
    for m in modules:
        if m.role != "text_encoder":
            continue
        key = (m.format, m.encoder, m.encoder_id)
        width = None
        if m.path.endswith(("q_proj", "k_proj", "v_proj", "mlp.fc1", "SelfAttention.q", "SelfAttention.k")):
            width = m.in_features
        elif m.path.endswith(("out_proj", "mlp.fc2", "SelfAttention.o")):
            width = m.out_features
        if width is not None:
            ins.setdefault(key, Counter())[width] += 1
    return {k: c.most_common(1)[0][0] for k, c in ins.items()}


def _is_t5(m: LoraModule) -> bool:
    return "SelfAttention" in m.path or "DenseReluDense" in m.path or m.path.startswith("encoder.block")


def _sd_from_text(te: Sequence[LoraModule]) -> str | None:
    widths = set(encoder_widths(te).values())
    if 1280 in widths:
        return "sdxl"
    if widths == {1024}:
        return "sd2"
    if widths == {768}:
        return "sd1"
    return None


def _unet(dm: Sequence[LoraModule], te: Sequence[LoraModule]) -> BaseGuess | None:
    unet = [m for m in dm if _head(m) in _UNET_HEADS]
    if not unet:
        return None
    ctx, probe = _width(unet, ("attn2.to_k", "attn2.to_v"))
    if ctx is not None and probe is not None:
        if ctx not in _CROSS_WIDTH:
            return BaseGuess(None, f"{probe.name} reads {ctx}-wide text features, which no known UNet uses")
        family, label = _CROSS_WIDTH[ctx]
        return BaseGuess(family, f"cross-attention {probe.name} reads {ctx}-wide text features ({label})")
    deep = next((m for m in unet if (_index(m, "transformer_blocks") or 0) >= 1), None)
    shallow = next((m for m in unet if m.path.startswith(_SD12_ONLY + _SD12_ONLY_OUT)), None)
    if deep is not None and shallow is None:
        return BaseGuess("sdxl", f"{deep.name} sits in a transformer stack deeper than one block (SDXL only)")
    text = _sd_from_text(te)
    if shallow is None and text == "sdxl":
        return BaseGuess("sdxl", "the UNet modules fit SD1 and SDXL; the text encoders include CLIP-G (1280)")
    proj, pm = _width(unet, ("proj_in", "proj_out"), "conv")
    if proj is not None and pm is not None:
        if proj:
            return BaseGuess("sd1", f"{pm.name} is a 1x1 convolution (SD1; SD2 and SDXL use linear layers)")
        if shallow is not None:
            return BaseGuess(
                "sd2", f"{pm.name} is a linear layer in an SD1/SD2 block (SD2; SD1 uses 1x1 convs)"
            )
        return BaseGuess(
            "sdxl",
            f"{pm.name} is a linear projection (SD2 or SDXL)",
            ("sdxl", "sd2"),
            tie="SD2 and SDXL LoRAs that touch only these layers share shapes; assuming sdxl",
        )
    if text in ("sd1", "sd2"):
        width = 768 if text == "sd1" else 1024
        return BaseGuess(text, f"the UNet modules fit SD1 and SD2; the text encoder is {width} wide")
    if shallow is None:
        return BaseGuess(
            "sd1",
            "UNet module names without cross-attention or depth clues; assuming SD1",
            ("sd1", "sd2", "sdxl"),
            tie="the base model cannot be read from this LoRA's shapes (SD1, SD2 and SDXL fit); assuming sd1",
        )
    return BaseGuess(
        "sd1",
        f"{shallow.name} has the SD1/SD2 UNet layout; nothing in the shapes separates SD1 from SD2",
        ("sd1", "sd2"),
        tie="SD1 and SD2 LoRAs that touch only these layers share shapes; assuming sd1",
    )


def _flux_like(dm: Sequence[LoraModule]) -> BaseGuess | None:
    mods = [m for m in dm if _head(m) in ("double_blocks", "single_blocks")]
    if not mods:
        return None
    hv = _any(mods, (".img_mlp.fc1", ".img_mod.linear", "modulation.linear", ".txt_mlp.fc1"))
    if hv is not None:
        return BaseGuess("hunyuan-video", f"{hv.name} uses HunyuanVideo's layer names (fc1 / linear)")
    if _max_index(mods, "double_blocks") >= 19 or _max_index(mods, "single_blocks") >= 38:
        return BaseGuess("hunyuan-video", "more double/single blocks than Flux has (19/38): HunyuanVideo")
    hidden, probe = _width(
        mods, ("img_attn.qkv", "txt_attn.qkv", "linear1", "img_attn.proj", "modulation.lin")
    )
    width = f", hidden width {hidden}" if hidden else ""
    name = probe.name if probe is not None else mods[0].name
    warn = () if hidden in (None, 3072) else (f"Flux blocks with hidden width {hidden} (Flux has 3072)",)
    return BaseGuess(
        "flux-dev", f"{name} is a Flux double/single-stream block{width}", FLUX_LINE, warn, FLUX_TIE
    )


def _mmdit_width(hidden: int | None, attn2: LoraModule | None, where: str) -> BaseGuess:
    if hidden == 2432:
        return BaseGuess("sd3.5-large", f"{where} is an MMDiT block 2432 wide (SD3.5 large)")
    if hidden == 1536 and attn2 is not None:
        return BaseGuess("sd3.5-medium", f"{attn2.name} is a second attention only SD3.5 medium has")
    if hidden == 1536:
        return BaseGuess("sd3", f"{where} is an MMDiT block 1536 wide (SD3 medium)", ("sd3", "sd3.5-medium"))
    return BaseGuess(None, f"{where} is an MMDiT block {hidden or 'of unknown'} wide, which no known SD3 has")


def _sd3_original(dm: Sequence[LoraModule]) -> BaseGuess | None:
    mods = [m for m in dm if _head(m) == "joint_blocks"]
    if not mods:
        return None
    hidden, probe = _width(mods, ("attn.qkv", "mlp.fc1", "attn.proj", "attn2.qkv"))
    attn2 = _any(mods, (".x_block.attn2.",))
    return _mmdit_width(hidden, attn2, (probe or mods[0]).name)


_JOINT_MARKS = (
    ".attn.add_k_proj",
    ".attn.add_q_proj",
    ".attn.add_v_proj",
    ".attn.to_add_out",
    ".ff_context.",
)
_QWEN_MARKS = (".img_mlp.", ".txt_mlp.", ".img_mod.", ".txt_mod.")
_DIT_HIDDEN = (
    "attn.to_q",
    "attn.to_k",
    "attn.to_v",
    "ff.net.0.proj",
    "norm1.linear",
    "proj_mlp",
    "attn1.to_q",
)


def _dit_diffusers(dm: Sequence[LoraModule]) -> BaseGuess | None:
    heads = {"transformer_blocks", "single_transformer_blocks", "joint_transformer_blocks"}
    mods = [m for m in dm if _head(m) in heads]
    if not mods:
        return None
    if any(_head(m) == "joint_transformer_blocks" for m in mods):
        return BaseGuess("auraflow", "joint_transformer_blocks with single blocks: AuraFlow")
    hidden, probe = _width(mods, _DIT_HIDDEN)
    where = (probe or mods[0]).name
    singles = [m for m in mods if _head(m) == "single_transformer_blocks"]
    joint = _any(mods, _JOINT_MARKS)
    qwen = _any(mods, _QWEN_MARKS)
    if qwen is not None:
        return BaseGuess("qwen-image", f"{qwen.name} uses Qwen-Image's img_mlp/txt_mlp/img_mod layers")
    if singles or joint is not None:
        if hidden == 3072:
            if _max_index(singles, "single_transformer_blocks") >= 38 or _any(dm, ("token_refiner",)):
                return BaseGuess("hunyuan-video", f"{where}: more single blocks than Flux (38): HunyuanVideo")
            if not singles and _max_index(mods, "transformer_blocks") >= 19:
                return BaseGuess(
                    "qwen-image", f"{where}: joint blocks past Flux's 19 and 3072 wide: Qwen-Image"
                )
            alts = FLUX_LINE if singles else (*FLUX_LINE, "qwen-image")
            return BaseGuess(
                "flux-dev", f"{where} is a joint-attention block 3072 wide (Flux)", alts, tie=FLUX_TIE
            )
        attn2 = _any(mods, (".attn2.",))
        return _mmdit_width(hidden, attn2, where)
    if _any(mods, (".attn2.",)) is not None and (hidden == PIXART_WIDTH or _any(dm, ("adaln_single.",))):
        return _pixart_guess(dm, hidden, f"{where}: self + cross attention blocks")
    if _any(mods, (".attn2.",)) is not None and hidden == 2048:
        return BaseGuess("ltxv", f"{where}: self + cross attention blocks 2048 wide (LTX-Video)")
    return BaseGuess(None, f"{where}: transformer blocks {hidden or 'of unknown'} wide match no known family")


def _pixart_guess(dm: Sequence[LoraModule], hidden: int | None, what: str) -> BaseGuess:
    """PixArt-α where the adapter touches its size micro-conditions, else Σ (their blocks are alike)."""
    warn = (
        ()
        if hidden in (None, PIXART_WIDTH)
        else (f"PixArt blocks {hidden} wide (PixArt has {PIXART_WIDTH})",)
    )
    alpha = _any(dm, _PIXART_ALPHA_MARKS)
    if alpha is not None:
        return BaseGuess("pixart-alpha", f"{alpha.name} is PixArt-α's size micro-condition", (), warn)
    width = f", {hidden} wide" if hidden else ""
    return BaseGuess("pixart-sigma", f"{what}{width} (PixArt)", PIXART_LINE, warn, PIXART_TIE)


def _pixart_original(dm: Sequence[LoraModule]) -> BaseGuess | None:
    """The original (ComfyUI) layout: ``blocks.N.cross_attn.{q_linear, kv_linear}`` are PixArt's names."""
    mods = [m for m in dm if _head(m) == "blocks"]
    mark = _any(mods, (".cross_attn.q_linear", ".cross_attn.kv_linear"))
    if mark is None:
        return None
    hidden, _ = _width(mods, (".attn.qkv", ".attn.proj", ".cross_attn.q_linear", ".mlp.fc1"))
    return _pixart_guess(dm, hidden, f"{mark.name} is a PixArt cross-attention")


def _wan(dm: Sequence[LoraModule]) -> BaseGuess | None:
    mods = [
        m
        for m in dm
        if _head(m) == "blocks" and _any([m], (".self_attn.", ".cross_attn.", ".ffn.", ".attn1."))
    ]
    if not mods:
        return None
    hidden, probe = _width(mods, ("self_attn.q", "self_attn.k", "cross_attn.q", "ffn.0", "attn1.to_q"))
    where = (probe or mods[0]).name
    if hidden == 3072:
        return BaseGuess("wan2.2", f"{where}: a Wan block 3072 wide (Wan 2.2 5B)")
    if hidden in (1536, 5120):
        alts = ("wan2.1", "wan2.2") if hidden == 5120 else ()
        tie = "Wan 2.1 14B and Wan 2.2 A14B LoRAs share shapes; reported as wan2.1" if alts else ""
        return BaseGuess("wan2.1", f"{where}: a Wan block {hidden} wide", alts, tie=tie)
    return BaseGuess(None, f"{where}: Wan-style blocks {hidden or 'of unknown'} wide match no known Wan")


def _auraflow(dm: Sequence[LoraModule]) -> BaseGuess | None:
    m = next((m for m in dm if _head(m) in ("double_layers", "single_layers")), None)
    return None if m is None else BaseGuess("auraflow", f"{m.name} is an AuraFlow double/single layer")


def _text_only(te: Sequence[LoraModule]) -> BaseGuess | None:
    if not te:
        return None
    t5 = any(_is_t5(m) for m in te)
    widths = set(encoder_widths([m for m in te if not _is_t5(m)]).values())
    if t5 and 1280 in widths:
        return BaseGuess(
            "sd3", "text encoders only: CLIP-L, CLIP-G and T5 (SD3)", ("sd3", "sd3.5-medium", "sd3.5-large")
        )
    if t5:
        return BaseGuess("flux-dev", "text encoders only: CLIP-L and T5 (Flux)", FLUX_LINE, tie=FLUX_TIE)
    family = _sd_from_text(te)
    if family is None:
        return None
    alts = ("sd1", "sdxl", "sd3", "flux-dev") if family == "sd1" else ()
    return BaseGuess(family, f"text encoders only, {sorted(widths)} wide", alts)


def _package_rule(
    guess: Callable[[Sequence[LoraModule]], tuple[str | None, str, tuple[str, ...]] | None],
) -> Callable[[Sequence[LoraModule]], BaseGuess | None]:
    """A rule from a family module's ``guess`` (family, evidence, warnings)."""
    return lambda dm: None if (found := guess(dm)) is None else BaseGuess(found[0], found[1], (), found[2])


_RULES: tuple[Callable[[Sequence[LoraModule]], BaseGuess | None], ...] = (
    _sd3_original,
    _package_rule(lora_flux2.guess),
    _flux_like,
    _dit_diffusers,
    _pixart_original,
    _wan,
    _auraflow,
    _package_rule(lora_nextdit.guess),
)


def guess_base(modules: Sequence[LoraModule]) -> BaseGuess:
    dm = [m for m in modules if m.role == "diffusion_model"]
    te = [m for m in modules if m.role == "text_encoder"]
    guess = _unet(dm, te)
    for rule in _RULES:
        if guess is not None:
            break
        guess = rule(dm)
    if guess is None:
        guess = _text_only(te)
    if guess is None:
        return BaseGuess(None, "no module name or shape points to a known base model")
    return guess


_FALLBACK_IDS = {
    ("sd1", 1): "clip-l",
    ("sd2", 1): "clip-h",
    ("sdxl", 1): "clip-l",
    ("sdxl", 2): "clip-g",
    ("sd3", 1): "clip-l",
    ("sd3", 2): "clip-g",
    ("sd3", 3): "t5-xxl",
    ("flux", 1): "clip-l",
    ("flux", 3): "t5-xxl",
}


def encoder_id(m: LoraModule, width: int | None, family: str | None) -> str | None:
    """A text encoder id for one text-encoder module, from its encoder's width or the family."""
    if m.encoder_id is not None:
        return m.encoder_id
    if width is not None:
        if _is_t5(m):
            if width == 4096:
                return "umt5-xxl" if family and family.startswith("wan") else "t5-xxl"
            return "t5-base" if width == 768 else None
        return _CLIP_IDS.get(width)
    line = (family or "").split("-")[0].split(".")[0]
    return _FALLBACK_IDS.get((line, m.encoder or 0))
