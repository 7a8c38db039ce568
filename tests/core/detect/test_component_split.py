"""No tensor belongs to two components: the split of every fixture layout, and of mixes built to provoke it.

ComfyUI saves each text encoder of an all-in-one file as ``text_encoders.<name>.transformer.*`` plus
its wrapper's ``text_encoders.<name>.logit_scale``; a split that read the name twice (once for the
known ``transformer.`` prefix, once for the scalar beside it) listed CLIP-L and T5 twice. The
invariant is checked on slots (:meth:`Slot.owns`) and on what detection reports (one component per
prefix, tensor counts and bytes that add up to no more than the file).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from core.detect.checkpoint import (
    COMPONENT_PREFIXES,
    TEXT_ENCODER_NAMES,
    Slot,
    _disjoint,
    split_components,
)
from core.detect.detector import detect
from core.detect.keyview import KeyView
from tests.fixtures import aux_layouts as A
from tests.fixtures import layouts_diffusion as L
from tests.fixtures import layouts_encoders as E
from tests.fixtures.tiny_models import CHECKPOINTS as TINY_CHECKPOINTS
from tests.fixtures.tiny_models import checkpoint_tensors

Spec = E.Spec
Shapes = Mapping[str, Spec]

TE = "text_encoder"


def _te(layout: Shapes, name: str, *, scalar: bool = True) -> dict[str, Spec]:
    out: dict[str, Spec] = E.prefixed(dict(layout), f"text_encoders.{name}.transformer.")
    if scalar:
        out[f"text_encoders.{name}.logit_scale"] = ()
    return out


def _fixture_layouts() -> dict[str, Callable[[], Shapes]]:
    """Every layout builder of tests/fixtures that describes a model file (not an adapter)."""
    out: dict[str, Callable[[], Shapes]] = {}
    for fam, build in L.DIFFUSION_LAYOUTS.items():
        out[f"bare:{fam}"] = build
        out[f"ckpt-prefix:{fam}"] = lambda b=build: L.with_prefix(b(), "model.diffusion_model.")  # type: ignore[misc]
        out[f"model-prefix:{fam}"] = lambda b=build: L.with_prefix(b(), "model.")  # type: ignore[misc]
    for fam, build in L.DIFFUSERS_LAYOUTS.items():
        out[f"diffusers:{fam}"] = build
    out |= {
        "sd1_checkpoint": L.sd1_checkpoint,
        "sd1_checkpoint-no-ema": lambda: L.sd1_checkpoint(ema=False),
        "sd1_checkpoint-inpaint": lambda: L.sd1_checkpoint(in_channels=9),
        "sd2_checkpoint": L.sd2_checkpoint,
        "sdxl_checkpoint": L.sdxl_checkpoint,
        "sdxl_refiner_checkpoint": L.sdxl_refiner_checkpoint,
        "flux_dev_fp8_comfy": L.flux_dev_fp8_comfy,
    }
    for kind in ("sd3", "sd3.5-medium", "sd3.5-large"):
        for t5 in (True, False):
            out[f"sd3_checkpoint:{kind}:t5={t5}"] = lambda k=kind, t=t5: L.sd3_checkpoint(k, t5=t)  # type: ignore[misc]
    for kind in ("dev", "schnell", "fill"):
        out[f"flux_checkpoint:{kind}"] = lambda k=kind: L.flux_checkpoint(k)  # type: ignore[misc]
    encoders: dict[str, Callable[[], Shapes]] = {
        "clip_l_hf": E.clip_l_hf,
        "clip_h_hf": E.clip_h_hf,
        "clip_g_hf": E.clip_g_hf,
        "clip_l_open_clip": E.clip_l_open_clip,
        "clip_h_open_clip": E.clip_h_open_clip,
        "clip_g_open_clip": E.clip_g_open_clip,
        "t5_xxl": E.t5_xxl,
        "t5_base": E.t5_base,
        "umt5_xxl": E.umt5_xxl,
        "umt5_xxl_wan": E.umt5_xxl_wan,
        "llama31_8b": E.llama31_8b,
        "qwen25_vl_7b": E.qwen25_vl_7b,
        "gemma2_2b": E.gemma2_2b,
        "vae_kl": E.vae_kl,
        "vae_kl_diffusers": E.vae_kl_diffusers,
        "wan_vae": E.wan_vae,
    }
    for name, build in encoders.items():
        out[f"encoder:{name}"] = build
        out[f"comfy-te:{name}"] = lambda b=build, n=name: _te(b(), n)  # type: ignore[misc]
    aux: dict[str, Callable[[], Shapes]] = {
        "esrgan_old": A.esrgan_old,
        "esrgan_new": A.esrgan_new,
        "srvgg_compact": A.srvgg_compact,
        "swinir": A.swinir,
        "embedding_sd1": A.embedding_sd1,
        "embedding_sd2": A.embedding_sd2,
        "embedding_sdxl": A.embedding_sdxl,
    }
    out |= {f"aux:{k}": v for k, v in aux.items()}
    for fam in TINY_CHECKPOINTS:
        out[f"tiny:{fam}"] = lambda f=fam: {k: tuple(v.shape) for k, v in checkpoint_tensors(f).items()}  # type: ignore[misc]
    return out


def _provoking_layouts() -> dict[str, Callable[[], Shapes]]:
    """Mixes where two prefix rules could both claim keys."""
    clip = L.clip_text(768, 12, projection=768)
    t5 = L.t5_encoder(4096, 10240, 2, 64)
    return {
        # the bug: the wrapper's scalar beside each known transformer. sub-tree
        "flux+scalars": lambda: L.flux_checkpoint(),
        # a bare diffusion model beside ComfyUI text encoders: the scalars are not the model's
        "bare-flux+comfy-te": lambda: L.flux("dev") | _te(clip, "clip_l") | _te(t5, "t5xxl"),
        # names Loadout does not know, with and without a transformer. sub-tree, with stray keys
        "unknown-te-names": lambda: (
            L.with_prefix(L.sd3_mmdit(), "model.diffusion_model.")
            | _te(clip, "hydit_clip")
            | L.with_prefix(t5, "text_encoders.mystery.")
            | {"text_encoders.mystery.logit_scale": (), "text_encoders.clip_l2.transformer.x": (4,)}
        ),
        # a name that starts another one (clip vs clip_l): no dot-less prefix may swallow it
        "te-name-prefix-of-another": lambda: _te(clip, "clip") | _te(clip, "clip_l") | _te(t5, "t5xxl"),
        # AuraFlow under ``model.`` with its Pile-T5 and scalar
        "auraflow+pile-t5": lambda: (
            L.with_prefix(L.auraflow(), "model.") | _te(L.t5_encoder(2048, 5120, 2, 32), "pile_t5xl")
        ),
        # an SD1 file with ComfyUI-named encoders mixed in (a hand-merged file)
        "sd1+comfy-te": lambda: L.sd1_checkpoint() | _te(clip, "clip_l"),
        # only scalars: no component at all
        "only-scalars": lambda: {
            "text_encoders.clip_l.logit_scale": (),
            "text_encoders.t5xxl.logit_scale": (),
        },
    }


ALL = _fixture_layouts() | _provoking_layouts()


def _view(layout: Mapping[str, Spec]) -> KeyView:
    return KeyView(E.tensor_infos(dict(layout)))


@pytest.mark.parametrize("name", sorted(ALL))
def test_each_tensor_belongs_to_at_most_one_component(name: str) -> None:
    view = _view(ALL[name]())
    slots = split_components(view)
    assert len({s.prefix for s in slots}) == len(slots), slots
    owned = 0
    for key in view:
        owners = [s.prefix for s in slots if s.owns(key)]
        assert len(owners) <= 1, (key, owners)
        owned += len(owners)
    for slot in slots:  # a slot's view is exactly the keys it owns
        assert len(slot.view(view)) == sum(1 for k in view if slot.owns(k)), slot
    assert sum(len(s.view(view)) for s in slots) == owned <= len(view)

    det = detect(view)
    prefixes = [c.prefix for c in det.components]
    assert len(set(prefixes)) == len(prefixes), prefixes
    assert sum(c.tensors for c in det.components) <= len(view)
    assert sum(c.bytes for c in det.components) <= view.nbytes()
    if det.kind == "checkpoint":
        by_prefix = {s.prefix: s for s in slots}
        for comp in det.components:
            own = [k for k in view if by_prefix[comp.prefix].owns(k)]
            assert comp.tensors == len(own)
            assert comp.bytes == sum(view[k].nbytes for k in own)


def test_comfy_text_encoders_are_one_slot_each_whatever_the_scalars() -> None:
    clip, t5 = L.clip_text(768, 12), L.t5_encoder(4096, 10240, 2, 64)
    for scalar in (False, True):
        view = _view(_te(clip, "clip_l", scalar=scalar) | _te(t5, "t5xxl", scalar=scalar))
        assert split_components(view) == [
            Slot(TE, "text_encoders.clip_l.transformer.", "clip-l"),
            Slot(TE, "text_encoders.t5xxl.transformer.", "t5-xxl"),
        ]


def test_unknown_text_encoder_names_follow_the_known_ones_sorted() -> None:
    clip = L.clip_text(768, 12)
    view = _view(_te(clip, "zeta") | _te(clip, "clip_g") | _te(clip, "alpha") | _te(clip, "clip_l"))
    assert [s.prefix for s in split_components(view)] == [
        "text_encoders.clip_l.transformer.",
        "text_encoders.clip_g.transformer.",
        "text_encoders.alpha.transformer.",
        "text_encoders.zeta.transformer.",
    ]
    assert list(TEXT_ENCODER_NAMES)[:3] == ["clip_l", "clip_g", "t5xxl"]


def test_prefix_table_has_no_nested_prefixes() -> None:
    prefixes = [p for p, _, _ in COMPONENT_PREFIXES]
    for a in prefixes:
        assert a.endswith(".")
        assert not a.startswith("text_encoders.")  # those are one slot per name, not table rows
        for b in prefixes:
            assert a == b or not a.startswith(b), (a, b)


def test_disjoint_drops_any_later_slot_whose_keys_are_taken() -> None:
    clip_l = Slot(TE, "text_encoders.clip_l.transformer.", "clip-l")
    wider = Slot(TE, "text_encoders.clip_l.", "clip-l")
    vae = Slot("vae", "vae.")
    assert _disjoint([clip_l, vae, clip_l]) == [clip_l, vae]  # the same prefix twice
    assert _disjoint([clip_l, wider, vae]) == [clip_l, vae]  # a prefix that contains another
    assert _disjoint([wider, clip_l]) == [wider]
    assert _disjoint([Slot(TE, "text_encoders.clip.", None), clip_l]) == [
        Slot(TE, "text_encoders.clip.", None),
        clip_l,
    ]  # "clip." does not start "clip_l."


def test_bare_diffusion_slot_excludes_comfy_text_encoder_scalars() -> None:
    view = _view(L.flux("dev") | _te(L.clip_text(768, 12), "clip_l"))
    bare = split_components(view)[0]
    assert bare.prefix == "" and bare.role == "diffusion_model"
    assert not bare.owns("text_encoders.clip_l.logit_scale")
    assert len(bare.view(view)) == len(L.flux("dev"))
