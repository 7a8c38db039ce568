"""The ControlNet table (which files fit which models) and the packages' ControlNet loaders hold
together: every ControlNet family the table applies beyond the UNets' is loaded by exactly one
package kind, and every package kind loads a family the table applies."""

from __future__ import annotations

from core.archs.catalog import CONTROLNETS, controlnet_loader
from core.detect.catalog import CONTROLNETS_FOR, UNET_CONTROLNETS, controlnet_applies


def test_every_applied_dit_controlnet_family_has_a_loader() -> None:
    applied = {fam for fams in CONTROLNETS_FOR.values() for fam in fams} - set(UNET_CONTROLNETS)
    for family in applied:
        kinds = [k.id for k in CONTROLNETS if family in k.families]
        assert kinds, f"{family} ControlNets are applied but no package loads them"


def test_every_loader_loads_an_applied_family() -> None:
    for kind in CONTROLNETS:
        assert kind.families and all(controlnet_applies(f) for f in kind.families), kind.id
        assert not set(kind.families) & set(UNET_CONTROLNETS), kind.id


def test_a_unet_family_has_no_package_loader() -> None:
    assert all(controlnet_loader(f, "original") is None for f in UNET_CONTROLNETS)
