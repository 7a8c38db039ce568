"""Detection: ``{key: TensorInfo}`` plus metadata -> :class:`Detection`.

The order matters and is the whole policy:

1. adapters (LoRA and friends) — their key names are unmistakable;
2. textual-inversion embeddings;
3. all-in-one checkpoints, split into components by key prefix, each component detected on its
   own prefix-stripped view;
4. standalone files: ControlNet before diffusion model (a ControlNet has ``input_blocks`` too),
   then VAE, text encoder, upscaler;
5. otherwise ``unknown``, with the nearest candidates in ``warnings``.

Where shapes cannot decide (SD1 vs SDXL VAE, SD2 eps vs v), file-name and metadata hints may pick
among the candidates the shapes allow, and the result says so.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, MutableMapping
from dataclasses import replace
from typing import Any, TypeVar

from core.detect.aux_kinds import match_embedding, match_preprocessor, match_upscale
from core.detect.catalog import REGISTRY
from core.detect.checkpoint import Slot, split_components
from core.detect.diffusion import match_controlnet, match_diffusion
from core.detect.encoders import match_text_encoder, match_vae
from core.detect.image_prompts import match_ip_adapter, match_redux
from core.detect.keyview import KeyView
from core.detect.lora import analyze_lora
from core.detect.lora_alpha import scale_metadata
from core.detect.metadata import family_hints
from core.detect.notes import note
from core.detect.prediction import stated_prediction, variant_word
from core.detect.registry import Match
from core.detect.types import Component, Detection, Kind, Role
from core.files.dtypes import DTYPES
from core.files.tensor_info import TensorInfo

_ROLE_MATCHERS = {
    "diffusion_model": match_diffusion,
    "vae": match_vae,
    "text_encoder": match_text_encoder,
}


def dominant_dtype(view: Mapping[str, TensorInfo]) -> str:
    """The storage dtype holding most of the bytes, as a person reads it ("fp16", "Q4_K")."""
    by_bytes: dict[str, int] = {}
    for info in view.values():
        by_bytes[info.dtype] = by_bytes.get(info.dtype, 0) + info.nbytes
    if not by_bytes:
        return "none"
    name = max(by_bytes, key=lambda d: by_bytes[d])
    dt = DTYPES.get(name)
    return dt.short if dt is not None else name


#: What detection remembers about one tensor structure (see ``detect``'s ``memo``).
Memo = MutableMapping[Hashable, Any]
T = TypeVar("T")


def _once(memo: Memo, key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, remembered in ``memo`` under ``key``: only for what depends on shapes alone."""
    if key in memo:
        return memo[key]  # type: ignore[no-any-return]
    value = memo[key] = compute()
    return value


def _component(
    memo: Memo,
    role: Role,
    family: str,
    prefix: str,
    view: KeyView,
    layout: str = "original",
    exclude: tuple[str, ...] = (),
) -> Component:
    tensors, params, nbytes, dtype = _once(
        memo,
        ("stats", role, prefix, exclude),
        lambda: (len(view), view.params(), view.nbytes(), dominant_dtype(view)),
    )
    return Component(
        role=role,
        family=family,
        prefix=prefix,
        tensors=tensors,
        params=params,
        bytes=nbytes,
        dtype=dtype,
        layout=layout,
        exclude=exclude,
    )


def _same_group(a: str, b: str) -> bool:
    fa, fb = REGISTRY.get(a), REGISTRY.get(b)
    return fa is not None and fb is not None and fa.group == fb.group


def _apply_hints(match: Match, filename: str | None, metadata: Mapping[str, str]) -> tuple[Match, list[str]]:
    """Resolve what shapes cannot decide with file-name/metadata hints, saying what was done.

    ``fields["ambiguous_with"]`` lists families with the same shapes: a hint may pick one of the
    same group (vae-flux vs vae-sd3, wan2.1 vs wan2.2); one of another group (the SD1/SD2/SDXL
    models a vae-sd serves) becomes the variant. ``fields["ambiguous_variants"]`` lists variants
    shapes cannot see (SD2 v-prediction); a hint may name one.
    """
    ambiguous = [str(f) for f in match.fields.get("ambiguous_with") or []]
    variants = [str(v) for v in match.fields.get("ambiguous_variants") or []]
    if not ambiguous and not variants:
        return match, []
    hints = family_hints(filename, metadata)
    family, variant, fields, notes = match.family, match.variant, dict(match.fields), []
    same = [f for f in ambiguous if _same_group(f, match.family)]
    served = [f for f in ambiguous if f not in same]
    if same:
        allowed = [match.family, *same]
        hint = next((h for h in hints if h.exact and h.family in allowed), None)
        if hint is None:
            notes.append(f"shapes cannot tell {' / '.join(allowed)} apart; shown as {family}")
        elif hint.family != family:
            family = str(hint.family)
            fields["hinted_by"] = hint.source
            notes.append(f"shapes cannot tell {' / '.join(allowed)} apart; {family} is a hint ({hint.text})")
    if served:
        hint = next((h for h in hints if h.family in served), None)
        if hint is None:
            notes.append(f"shapes cannot tell which of {' / '.join(served)} this {family} is for")
        else:
            variant = str(hint.family)
            notes.append(f"for {variant}: a hint, shapes cannot tell ({hint.text})")
    if variants:
        hint = next((h for h in hints if h.variant in variants), None)
        if hint is None:
            notes.append(f"shapes cannot tell whether this is {' or '.join(variants)}; check its model page")
        else:
            variant = hint.variant
            notes.append(f"{variant}: a hint, shapes cannot tell ({hint.text})")
    chosen = Match(family, match.layout, variant, fields, match.warnings, match.score)
    return chosen, notes


def _best(
    memo: Memo, tag: str, role: str, view: KeyView, filename: str | None, metadata: Mapping[str, str]
) -> tuple[Match | None, list[str]]:
    matches = _once(memo, ("matches", role, tag), lambda: _ROLE_MATCHERS[role](view))
    if not matches:
        return None, []
    best, notes = _apply_hints(matches[0], filename, metadata)
    return best, [*best.warnings, *notes]


def detect(
    tensors: Mapping[str, TensorInfo],
    metadata: Mapping[str, str] | None = None,
    filename: str | None = None,
    *,
    memo: Memo | None = None,
) -> Detection:
    """Classify a file from its tensor index. Pure: reads no data, mutates nothing but ``memo``.

    ``memo``: a dict the caller keeps for one tensor *structure* (the same names, dtypes, shapes;
    ``TensorIndex.structure``) and passes again for every file of that structure. What depends on
    the shapes alone (key views, component splits, family matches, the LoRA analysis for the same
    metadata hints) is computed once into it; what file names and metadata decide is applied on
    every call, so the result is the same as without it. File name and metadata reach detection
    only through ``family_hints``: keep it so, or key what else reads them.
    """
    meta: Mapping[str, str] = metadata or {}
    m: Memo = memo if memo is not None else {}
    view = _once(m, "view", lambda: KeyView(tensors))
    if len(view) == 0:
        return Detection(kind="unknown", warnings=("the file holds no tensors",))

    # analyze_lora reads metadata through family_hints(None, metadata) and the trained scale alone.
    lora_hints = (tuple(family_hints(None, meta)), scale_metadata(meta)) if memo is not None else ()
    # h94's FaceID IP-Adapters hold their LoRA's factors beside the adapter's own keys: an IP-Adapter
    ip_layout = "ip_adapter.1.to_k_ip.weight" in view and view.has_prefix("image_proj.")
    lora = None if ip_layout else _once(m, ("lora", lora_hints), lambda: analyze_lora(view, meta))
    if lora is not None:
        return Detection(
            kind="lora",
            family=lora.base_family,
            layout=lora.summary.format,
            lora=lora.summary,
            warnings=tuple(
                [*lora.warnings, note(f"base model: {lora.base_evidence}")]
                if lora.base_evidence
                else lora.warnings
            ),
        )

    emb = _once(m, "embedding", lambda: match_embedding(view))
    if emb is not None:
        return Detection(
            kind="embedding", family=emb.family, layout=emb.layout, warnings=emb.warnings, fields=emb.fields
        )

    checkpoint = _detect_checkpoint(m, view, filename, meta)
    found = checkpoint if checkpoint is not None else _detect_standalone(m, view, filename, meta)
    return _with_prediction(found, view, meta)


def _with_prediction(det: Detection, view: KeyView, meta: Mapping[str, str]) -> Detection:
    """A discrete-schedule model's prediction as its file states it (``core.detect.prediction``):
    ``fields["prediction"]`` ("eps", "v", "v-ztsnr") and ``fields["prediction_source"]``."""
    fam = REGISTRY.get(det.family) if det.family else None
    if det.kind not in ("checkpoint", "diffusion_model") or fam is None or fam.diffusion is None:
        return det
    if fam.diffusion.sampling.schedule != "discrete":
        return det
    fact = stated_prediction(view, meta)
    if fact is None:
        return det
    fields = {**det.fields, "prediction": fact.prediction, "prediction_source": fact.source}
    fields.pop("ambiguous_variants", None)
    variant = variant_word(fact.prediction) or (None if det.variant == "v-prediction" else det.variant)
    if det.variant not in (None, "v-prediction") and fact.v_prediction:
        variant = det.variant  # "inpaint" and the like stay the variant; the fields say v
    said = f"{fact.prediction}: {fact.source}"
    warnings = (*(w for w in det.warnings if "v-prediction" not in w), note(f"prediction {said}"))
    return replace(det, variant=variant, fields=fields, warnings=warnings)


def _detect_checkpoint(
    memo: Memo, view: KeyView, filename: str | None, meta: Mapping[str, str]
) -> Detection | None:
    slots = _once(memo, "slots", lambda: split_components(view))
    if not any(s.prefix for s in slots):
        return None
    warnings: list[str] = []
    components, diffusion = _slot_components(memo, view, slots, filename, meta, warnings)
    if diffusion is not None:
        components = [_vae_for(c, diffusion.family, warnings) for c in components]
    roles = {c.role for c in components}
    kind: Kind
    if diffusion is not None and roles == {"diffusion_model"}:
        kind = "diffusion_model"
        warnings.append(
            "this file holds only a diffusion model (no VAE or text encoders); load the VAE and "
            "text encoders from separate files"
        )
    elif diffusion is None and "diffusion_model" not in roles and len(components) == 1:
        # Only a VAE or text encoder under checkpoint prefixes (e.g. an extracted VAE).
        comp = components[0]
        return Detection(
            kind=comp.role,
            family=comp.family,
            layout="original",
            components=tuple(components),
            warnings=tuple(warnings),
        )
    else:
        kind = "checkpoint"
        if "vae" not in roles:
            warnings.append("this checkpoint has no VAE: load one beside it to decode images")
        if "text_encoder" not in roles:
            warnings.append("this checkpoint has no text encoders: load them beside it for prompts")
    return Detection(
        kind=kind,
        family=diffusion.family if diffusion else None,
        variant=diffusion.variant if diffusion else None,
        layout=diffusion.layout if diffusion else "original",
        components=tuple(components),
        warnings=tuple(dict.fromkeys(warnings)),
        fields=dict(diffusion.fields) if diffusion else {},
    )


def _slot_components(
    memo: Memo,
    view: KeyView,
    slots: list[Slot],
    filename: str | None,
    meta: Mapping[str, str],
    warnings: list[str],
) -> tuple[list[Component], Match | None]:
    """Each slot of a checkpoint matched against its role's families, and the first diffusion
    model's match (None when the file has none or it was not recognised)."""
    components: list[Component] = []
    diffusion: Match | None = None
    for i, slot in enumerate(slots):
        tag = f"slot{i}"
        sub = _once(memo, ("view", tag), lambda slot=slot: slot.view(view))  # type: ignore[misc]
        match, notes = _best(memo, tag, slot.role, sub, filename, meta)
        warnings.extend(notes)
        if match is None:
            family = "unknown"
            warnings.append(f"the {slot.role.replace('_', ' ')} under '{slot.prefix}' was not recognised")
        else:
            family = match.family
        if slot.role == "diffusion_model" and diffusion is None:
            diffusion = match
        layout = match.layout if match is not None else "original"
        components.append(_component(memo, slot.role, family, slot.prefix, sub, layout, slot.exclude))
    return components, diffusion


def _vae_for(comp: Component, diffusion_family: str, warnings: list[str]) -> Component:
    """Inside a checkpoint, the diffusion model says which of two same-shaped VAEs it carries."""
    fam = REGISTRY.get(diffusion_family)
    want = fam.diffusion.vae if fam is not None and fam.diffusion is not None else None
    if comp.role != "vae" or want is None or comp.family == want:
        return comp
    warnings.append(f"the VAE is {want}: the {diffusion_family} model it ships with says so")
    return replace(comp, family=want)


def _detect_image_prompt(memo: Memo, view: KeyView, filename: str | None) -> Detection | None:
    """An image encoder (a vision tower), an IP-Adapter or a style model (FLUX Redux), or None."""
    found = _once(memo, "image_encoder", lambda: REGISTRY.match(view, "image_encoder"))
    if found:
        m = found[0]
        comp = _component(memo, "image_encoder", m.family, "", view, m.layout)
        return Detection(
            kind="image_encoder", family=m.family, layout=m.layout, components=(comp,),
            warnings=m.warnings, fields=dict(m.fields),
        )  # fmt: skip
    style = _once(memo, "style_model", lambda: match_redux(view))
    if style is not None:
        return Detection(
            kind="style_model", family=style.family, layout=style.layout, fields=dict(style.fields)
        )
    ip = match_ip_adapter(view, filename)  # the name may say "face": not memoised
    if ip is None:
        return None
    return Detection(
        kind="ip_adapter", family=None if ip.family == "unknown" else ip.family, variant=ip.variant,
        layout=ip.layout, warnings=ip.warnings, fields=dict(ip.fields),
    )  # fmt: skip


def _detect_standalone(memo: Memo, view: KeyView, filename: str | None, meta: Mapping[str, str]) -> Detection:
    prompt = _detect_image_prompt(memo, view, filename)
    if prompt is not None:
        return prompt
    cn = _once(memo, "controlnet", lambda: match_controlnet(view))
    if cn is not None:
        return _plain("controlnet", cn)
    roles: tuple[Role, ...] = ("diffusion_model", "vae", "text_encoder")
    for r in roles:
        match, notes = _best(memo, "", r, view, filename, meta)
        if match is not None:
            return Detection(
                kind=r,
                family=match.family,
                variant=match.variant,
                layout=match.layout,
                components=(_component(memo, r, match.family, "", view, match.layout),),
                warnings=tuple(notes),
                fields=dict(match.fields),
            )
    up = _once(memo, "upscale", lambda: match_upscale(view))
    if up is not None:
        return _plain("upscale_model", up)
    pre = _once(memo, "preprocessor", lambda: match_preprocessor(view))
    if pre is not None:
        return _plain("preprocessor_model", pre)
    return Detection(kind="unknown", warnings=tuple(_candidates(view)))


def _plain(kind: Kind, m: Match) -> Detection:
    """A standalone file of one part (no components): the match as it is."""
    return Detection(
        kind=kind, family=m.family, variant=m.variant, layout=m.layout, warnings=m.warnings,
        fields=dict(m.fields),
    )  # fmt: skip


def _candidates(view: KeyView) -> list[str]:
    top = sorted(view.top_level().items(), key=lambda kv: -kv[1])[:5]
    shown = ", ".join(f"{name} ({n})" for name, n in top)
    return [
        f"not a model family Loadout knows; its keys start with {shown}",
        "if this is a model you use, please report it with the file's inspection report in JSON",
    ]


def detection_to_json(det: Detection) -> dict[str, Any]:
    return {
        "kind": det.kind,
        "family": det.family,
        "variant": det.variant,
        "layout": det.layout,
        "components": [c.to_json() for c in det.components],
        "lora": det.lora.to_json() if det.lora else None,
    }
