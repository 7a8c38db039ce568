"""One record per family: what a diffusion family needs lives on its ``Family`` record
(``core.detect``), and no other part of ``core`` keeps a table keyed by family id.

The grep-style test reads every ``core`` file outside ``core/detect`` and fails on a string literal
that is a diffusion family id. Names of other vocabularies that happen to be spelled like a family
(the latent formats ``sd1``/``sdxl``/``sd3``, the prompt encodings, the network conventions, the
memory profiles, the UNet presets) are read from the records themselves and allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core.archs.catalog import CODECS, NETS, TEXTS
from core.detect.catalog import REGISTRY, diffusion_spec, generation_defaults, latent_format_for
from core.detect.spec import LATENT_FORMATS
from core.errors import LoadoutError
from core.sampling import for_family

CORE = Path(__file__).resolve().parents[2] / "core"

#: Files that still hold family ids, each with why (debt the lead knows about, not new tables).
KNOWN: set[str] = set()


def _other_vocabularies() -> set[str]:
    names: set[str] = set(LATENT_FORMATS) | set(NETS.ids()) | set(TEXTS.ids()) | set(CODECS.ids())
    for fam in REGISTRY:
        names |= {fam.unet_preset, fam.network_preset, fam.latent_format, fam.lora_group}
        if fam.diffusion is not None and fam.diffusion.memory_profile:
            names.add(fam.diffusion.memory_profile)
    return names


def _family_literals(path: Path, ids: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ids:
            found.append(f"{path.relative_to(CORE)}:{node.lineno}: {node.value!r}")
    return found


def test_family_ids_appear_only_in_the_records() -> None:
    ids = {f.id for f in REGISTRY.group("diffusion")} - _other_vocabularies()
    assert {"flux-dev", "sdxl-refiner", "sd3.5-large", "ssd-1b"} <= ids  # the test can see something
    found = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).as_posix()
        if rel.startswith("detect/") or rel in KNOWN:
            continue
        found += _family_literals(path, ids)
    assert not found, "family facts belong on the family's record (core/detect):\n" + "\n".join(found)


def test_every_family_that_generates_has_a_complete_spec() -> None:
    generating = [f for f in REGISTRY.group("diffusion") if f.diffusion and f.diffusion.text]
    assert {f.id for f in generating} >= {
        "sd1", "sd2", "sdxl", "sd3", "flux-dev", "flux-schnell", "chroma", "pixart-sigma", "pixart-alpha",
    }  # fmt: skip
    for fam in generating:
        spec = diffusion_spec(fam.id)
        assert spec.network is not None and spec.text_encoders, fam.id
        assert latent_format_for(fam.id).channels == fam.latent_channels, fam.id
        assert REGISTRY.get(spec.vae) is not None and REGISTRY.get(spec.vae).group == "vae", fam.id
        assert all(REGISTRY.get(e) is not None for e in spec.text_encoders), fam.id
        assert spec.defaults.sizes and all(w % 8 == 0 and h % 8 == 0 for w, h in spec.defaults.sizes)
        for_family(fam.id)  # its model sampling resolves


def test_every_convention_a_record_may_name_is_implemented() -> None:
    """A new calling convention or prompt encoding is one entry where its code lives, and the
    records' vocabulary and those entries cannot drift apart."""
    for fam in REGISTRY.group("diffusion"):
        if fam.diffusion is not None and fam.diffusion.network is not None:
            assert fam.diffusion.network in NETS, fam.id
            assert fam.diffusion.text is None or fam.diffusion.text in TEXTS, fam.id
            assert fam.diffusion.codec in CODECS, fam.id


@pytest.mark.parametrize("family", ["wan2.1", "hunyuan-dit", "auraflow", "no-such-family", None])
def test_a_family_that_cannot_generate_is_refused_in_words(family: str | None) -> None:
    with pytest.raises(LoadoutError) as err:
        diffusion_spec(family)
    assert err.value.code == "unsupported_family" and err.value.fix


def test_defaults_come_from_the_record() -> None:
    assert generation_defaults("flux-schnell").steps == 4 and generation_defaults("flux-dev").guidance == 3.5
    assert generation_defaults("sd3.5-large").cfg == 4.5
    assert generation_defaults("sdxl").sizes[0] == (1024, 1024)
    assert generation_defaults(None).sizes[0] == (512, 512)
