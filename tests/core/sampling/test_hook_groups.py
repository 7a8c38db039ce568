"""Hook groups in the sampler's conditioning lists, as ComfyUI's ``_calc_cond_batch`` runs them
(comfy/samplers.py, ComfyUI 0.3.64+): the entries are split into ``hooked_to_run`` by hook group,
in the order each group's first entry comes (the positive's list, then the negative's), each group
batched as before and run after ``apply_hooks`` of its group; a copy of a positive area in the
negative's list keeps the positive entry's hooks (``create_cond_with_same_area_if_none`` copies
the dict and replaces only ``model_conds``). The call sequences below were worked out by hand from
that code. The weighing is unchanged: with a batch-invariant network the hooked result equals the
unhooked one to the bit."""

from __future__ import annotations

import torch

from core.sampling import Conditioning, for_family
from core.sampling.cfg import CfgDenoiser
from core.sampling.cond_entry import CondEntry, LatentArea
from core.sampling.denoiser import ModelDenoiser
from core.sampling.patches import ModelCall, ModelPatches
from tests.core.sampling.toy import ToyNet

AREA = CondEntry(Conditioning(torch.full((1, 77, 8), 0.3)), LatentArea(4, 4, 0, 0), strength=0.7)


def _run(patches: ModelPatches) -> tuple[torch.Tensor, list[tuple[frozenset[str], int]]]:
    seen: list[tuple[frozenset[str], int]] = []

    def record(call: ModelCall, apply: object) -> torch.Tensor:
        seen.append((call.hooks, call.x.shape[0]))
        return apply(call)  # type: ignore[operator]

    ms = for_family("sd1")
    den = ModelDenoiser(ToyNet(1 / 1000, 4), ms, patches=ModelPatches(wrappers=(record,)) + patches)
    pos, neg = Conditioning(torch.full((1, 77, 8), 1.0)), Conditioning(torch.full((1, 77, 8), -1.0))
    torch.manual_seed(0)
    x, sigma = torch.randn(1, 4, 8, 8), torch.tensor([2.0])
    return CfgDenoiser(den, pos, neg, 5.0, den.patches)(x, sigma), seen


P, N = frozenset({"positive"}), frozenset({"negative"})
REGIONS = ModelPatches(positive_conds=(AREA,))  # the sampler copies its area to the negative


def test_without_hooks_the_prompts_batch_as_before() -> None:
    _, seen = _run(REGIONS)
    # one group: [pos whole, area, neg whole, copy]: the whole ones batch (negative first), then
    # the area with its copy
    assert seen == [(frozenset(), 2), (frozenset(), 2)]


def test_a_positive_hook_splits_the_groups_and_the_copy_keeps_it() -> None:
    out, seen = _run(REGIONS + ModelPatches(positive_hooks=P))
    # hooked_to_run = {P: [pos whole, area, copy], None: [neg whole]}
    assert seen == [(P, 1), (P, 2), (frozenset(), 1)]
    plain, _ = _run(REGIONS)
    assert torch.equal(out, plain)


def test_a_negative_hook_runs_after_the_positives_group() -> None:
    out, seen = _run(REGIONS + ModelPatches(negative_hooks=N))
    # hooked_to_run = {None: [pos whole, area, copy], N: [neg whole]}: the copy has no hooks
    assert seen == [(frozenset(), 1), (frozenset(), 2), (N, 1)]
    assert torch.equal(out, _run(REGIONS)[0])


def test_both_prompts_hooked_and_an_entrys_own_labels_add_up() -> None:
    tagged = CondEntry(AREA.cond, AREA.area, AREA.strength, hooks=frozenset({"region 1"}))
    both_sides = ModelPatches(positive_conds=(tagged,), positive_hooks=P, negative_hooks=N)
    _, seen = _run(both_sides + ModelPatches(hook_labels=tagged.hooks))
    both = P | {"region 1"}
    # {P: [pos whole], P+region: [area, copy], N: [neg whole]}
    assert seen == [(P, 1), (both, 2), (N, 1)]


def test_an_entrys_own_label_counts_only_when_a_lora_acts_on_it() -> None:
    region = CondEntry(AREA.cond, AREA.area, AREA.strength, hooks=frozenset({"region1"}))
    plain, seen = _run(ModelPatches(positive_conds=(region,)))
    assert seen == [(frozenset(), 2), (frozenset(), 2)]  # no LoRA on it: batched as before
    hooked, seen = _run(ModelPatches(positive_conds=(region,), hook_labels=region.hooks))
    # {None: [pos whole, neg whole], region1: [the region, its copy in the negative's list]}
    assert seen == [(frozenset(), 2), (region.hooks, 2)]
    assert torch.equal(hooked, plain)
