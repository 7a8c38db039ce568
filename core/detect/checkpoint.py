"""Where the components of an all-in-one checkpoint live: one :class:`Slot` per component prefix.

An SD1 ``.ckpt`` keeps its UNet under ``model.diffusion_model.``, its VAE under ``first_stage_model.``
and CLIP-L under ``cond_stage_model.transformer.``; SDXL, the refiner, and ComfyUI-saved SD3/Flux
files use other prefixes (:data:`COMPONENT_PREFIXES`). This module only finds the slots; which text
encoder or VAE family sits in a slot is decided on the slot's sub-view. Scheduler buffers, EMA copies
and other leftovers (``alphas_cumprod``, ``model_ema.*``, ``logvar``...) are not components.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.detect.diffusion import match_diffusion
from core.detect.keyview import KeyView
from core.detect.types import Role

__all__ = ["COMPONENT_PREFIXES", "Slot", "split_components"]


@dataclass(frozen=True)
class Slot:
    """One component of a checkpoint.

    ``hint``: the family the prefix implies ("clip-l" under ``cond_stage_model.transformer.``), for the
    text-encoder/VAE rules to confirm; None when the prefix says nothing. ``exclude``: for a component
    stored without a prefix (``prefix == ""``), the key prefixes that are not its own (the other
    slots, EMA copies, scheduler buffers); use :meth:`view` to get its keys.
    """

    role: Role
    prefix: str
    hint: str | None = None
    exclude: tuple[str, ...] = ()

    def owns(self, key: str) -> bool:
        """Whether ``key`` (a full file key) is one of this component's tensors."""
        if self.prefix:
            return key.startswith(self.prefix)
        return not key.startswith(self.exclude) if self.exclude else True

    def view(self, whole: KeyView) -> KeyView:
        """The slot's keys with its prefix removed (for a bare slot: without the other slots' keys)."""
        if not self.exclude:
            return whole.sub(self.prefix)
        return KeyView({k: v for k, v in whole.items() if not k.startswith(self.exclude)})


#: (prefix, role, hint) of every all-in-one layout in use, in the order slots are reported
COMPONENT_PREFIXES: tuple[tuple[str, Role, str | None], ...] = (
    ("model.diffusion_model.", "diffusion_model", None),
    ("first_stage_model.", "vae", None),
    ("vae.", "vae", None),
    ("cond_stage_model.transformer.", "text_encoder", "clip-l"),  # SD1
    ("cond_stage_model.model.", "text_encoder", "clip-h"),  # SD2 (OpenCLIP ViT-H)
    ("conditioner.embedders.0.transformer.", "text_encoder", "clip-l"),  # SDXL
    ("conditioner.embedders.1.model.", "text_encoder", "clip-g"),  # SDXL (OpenCLIP ViT-bigG)
    ("conditioner.embedders.0.model.", "text_encoder", "clip-g"),  # SDXL refiner
)

#: ComfyUI-saved files (SD3, SD3.5, Flux, AuraFlow...) keep each text encoder under
#: ``text_encoders.<name>.``: the network under ``<name>.transformer.`` and, beside it, the scalar
#: ``<name>.logit_scale`` of ComfyUI's wrapper. One slot per name, reported in this order
#: (then unknown names, sorted); value: the family the name implies.
TEXT_ENCODER_NAMES: dict[str, str | None] = {
    "clip_l": "clip-l",
    "clip_g": "clip-g",
    "t5xxl": "t5-xxl",
    "t5base": "t5-base",
    "umt5xxl": "umt5-xxl",
    "pile_t5xl": None,  # AuraFlow
    "hydit_clip": None,  # HunyuanDiT's Chinese CLIP
    "mt5xl": None,
}

_TE_HEAD = "text_encoders"
_HEADS = frozenset(p.partition(".")[0] for p, _, _ in COMPONENT_PREFIXES) | {_TE_HEAD}
#: buffers of the LDM/SGM training wrapper saved beside the weights
_SCHEDULER_BUFFERS = frozenset(
    {
        "alphas_cumprod",
        "alphas_cumprod_prev",
        "betas",
        "logvar",
        "log_one_minus_alphas_cumprod",
        "lvlb_weights",
        "posterior_log_variance_clipped",
        "posterior_mean_coef1",
        "posterior_mean_coef2",
        "posterior_variance",
        "sqrt_alphas_cumprod",
        "sqrt_one_minus_alphas_cumprod",
        "sqrt_recip_alphas_cumprod",
        "sqrt_recipm1_alphas_cumprod",
        "edm_mean",
        "edm_std",
    }
)
#: top-level names that are neither a component nor part of one (EMA copies, scheduler buffers)
_IGNORED_HEADS = _SCHEDULER_BUFFERS | {"model_ema", "global_step", "epoch"}


_BY_HEAD: dict[str, tuple[str, ...]] = {
    head: tuple(p for p, _, _ in COMPONENT_PREFIXES if p.startswith(head + ".")) for head in _HEADS
}


@dataclass
class _Scan:
    present: set[str]  # known prefixes with keys
    te_names: set[str]  # ``text_encoders.<name>.`` names
    bare: bool = False  # keys outside every known prefix and every ignored name
    under_model: bool = False  # ``model.<x>`` keys outside ``model.diffusion_model.``


def _scan(view: KeyView) -> _Scan:
    """One pass over the keys."""
    found = _Scan(set(), set())
    for key in view:
        head, _, rest = key.partition(".")
        if head not in _HEADS:
            found.bare = found.bare or head not in _IGNORED_HEADS
            continue
        if head == _TE_HEAD:
            found.te_names.add(rest.partition(".")[0])
            continue
        hit = next((p for p in _BY_HEAD[head] if key.startswith(p)), None)
        if hit is not None:
            found.present.add(hit)
        elif head == "model":
            found.under_model = True
    return found


def _te_order(name: str) -> tuple[int, str]:
    order = list(TEXT_ENCODER_NAMES)
    return (order.index(name), "") if name in TEXT_ENCODER_NAMES else (len(order), name)


def _text_encoder_slot(view: KeyView, name: str) -> Slot:
    """The one slot of ``text_encoders.<name>.``: its ``transformer.`` sub-tree where it has one (the
    wrapper's ``logit_scale`` beside it then belongs to no component), else everything under the name."""
    base = f"{_TE_HEAD}.{name}."
    deeper = base + "transformer."
    prefix = deeper if view.has_prefix(deeper) else base
    return Slot("text_encoder", prefix, TEXT_ENCODER_NAMES.get(name))


def _bare_diffusion(view: KeyView, found: _Scan, taken: list[Slot]) -> Slot | None:
    """A diffusion model stored under ``model.`` (AuraFlow) or with no prefix at all."""
    if any(s.role == "diffusion_model" for s in taken):
        return None
    if found.under_model and match_diffusion(view.sub("model.")):
        return Slot("diffusion_model", "model.")
    if found.bare and match_diffusion(
        view
    ):  # rules look keys up: the other components' keys cannot mislead them
        # the whole ``text_encoders.`` tree: a wrapper scalar beside a slot is not the model's either
        others = (*(s.prefix for s in taken), _TE_HEAD + ".", *sorted(_IGNORED_HEADS))
        return Slot("diffusion_model", "", exclude=others)
    return None


def _overlaps(a: str, b: str) -> bool:
    return a.startswith(b) or b.startswith(a)


def _disjoint(slots: list[Slot]) -> list[Slot]:
    """``slots`` less any whose keys an earlier slot already owns, so that no tensor is in two
    components whatever the prefix tables say. A bare slot (prefix "") excludes the others by
    construction; two prefixed slots overlap when one prefix starts the other."""
    kept: list[Slot] = []
    for slot in slots:
        if not any(s.prefix and slot.prefix and _overlaps(s.prefix, slot.prefix) for s in kept):
            kept.append(slot)
    return kept


def split_components(view: KeyView) -> list[Slot]:
    """The component slots of the file behind ``view``: diffusion model first, then VAE, text encoders.

    Prefixes without keys are not returned. Keys outside every known prefix form a bare diffusion
    slot only when they hold a diffusion model; other leftovers are ignored. No key is owned by two
    slots (:meth:`Slot.owns`): each prefix is one slot, and overlapping prefixes are dropped.
    """
    found = _scan(view)
    slots = [Slot(role, p, hint) for p, role, hint in COMPONENT_PREFIXES if p in found.present]
    slots += [_text_encoder_slot(view, n) for n in sorted(found.te_names, key=_te_order)]
    slots = _disjoint(slots)
    diffusion = _bare_diffusion(view, found, slots)
    if diffusion is not None:
        slots.insert(0, diffusion)
    return slots
