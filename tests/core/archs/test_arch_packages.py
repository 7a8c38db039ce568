"""The architecture packages behind the three protocols: registries refuse duplicates, every record
names parts that exist, and a part's knowledge stays in its package (no shared file branches on a
network's, a prompt encoding's or a codec's name, or on a network's class)."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from core.archs.catalog import CODECS, NETS, REFERENCES, TEXTS, codec_of, net_of, packages
from core.archs.protocols import DiffusionNet, LatentCodec, TextConvention
from core.archs.registry import Registry, UnknownPart
from core.detect.catalog import REGISTRY, build_registry
from core.detect.registry import Registry as FamilyRegistry
from core.errors import ModelMismatchError

CORE = Path(__file__).resolve().parents[3] / "core"
#: the files the issue found convention chains in, and every other file outside the packages
SHARED = [
    p
    for p in sorted(CORE.rglob("*.py"))
    if not p.relative_to(CORE).as_posix().startswith(("archs/", "detect/"))
]
#: network and codec classes (their packages' ``owns``); the configs they are built from
PART_CLASSES = {
    "UNetModel", "MMDiT", "Flux", "Chroma", "PixArt", "AutoencoderKL",
    "UNetConfig", "MMDiTConfig", "FluxConfig", "ChromaConfig", "PixArtConfig", "VAEConfig",
}  # fmt: skip
#: files that import a package module directly (and why): none but the catalog's lookups
DIRECT_IMPORTS: dict[str, str] = {
    "loading/convert/unet_diffusers.py": "the UNet key map's older import path (the parity tests use it)",
    "loading/convert/vae_diffusers.py": "the KL-VAE key map's older import path (the parity tests use it)",
    "loading/convert/open_clip.py": "the CLIP key map's older import path (the fixtures use it)",
}


def missing_parts(registry: FamilyRegistry) -> list[str]:
    """Every (family, part) a record names that no package gives."""
    out = []
    for fam in registry.group("diffusion"):
        spec = fam.diffusion
        if spec is None or spec.network is None:
            continue
        for kind, key, parts in (("network", spec.network, NETS), ("text", spec.text, TEXTS)):
            if key is not None and key not in parts:
                out.append(f"{fam.id}: {kind} {key!r}")
        if spec.codec not in CODECS:
            out.append(f"{fam.id}: codec {spec.codec!r}")
        net = NETS.get(spec.network)
        if spec.references is not None and spec.references not in REFERENCES:
            out.append(f"{fam.id}: references {spec.references!r}")
        if spec.references is not None and net is not None and not net.calling.references:
            out.append(f"{fam.id}: references on {spec.network}, which takes none")
        if net is not None and spec.memory_profile is not None and spec.memory_profile not in net.memory:
            out.append(f"{fam.id}: memory profile {spec.memory_profile!r} of {spec.network}")
        if spec.memory_profile is None:  # it would be planned with the fallback bound, not measured
            out.append(f"{fam.id}: no memory profile")
    return out


def test_every_record_names_parts_that_exist() -> None:
    assert missing_parts(REGISTRY) == []


def test_a_record_naming_a_part_that_does_not_exist_is_found() -> None:
    registry = build_registry()
    sd1 = registry.get("sd1")
    assert sd1 is not None and sd1.diffusion is not None
    bad = replace(sd1, id="sd1-bad", diffusion=replace(sd1.diffusion, network="no-such-net", codec="nope"))
    registry.add(bad)
    refs = replace(sd1, id="sd1-refs", diffusion=replace(sd1.diffusion, references="nope"))
    registry.add(refs)
    registry.add(replace(sd1, id="sd1-unmeasured", diffusion=replace(sd1.diffusion, memory_profile=None)))
    assert missing_parts(registry) == [
        "sd1-bad: network 'no-such-net'", "sd1-bad: codec 'nope'",
        "sd1-refs: references 'nope'", "sd1-refs: references on unet, which takes none",
        "sd1-unmeasured: no memory profile",
    ]  # fmt: skip


def test_registries_refuse_duplicates_and_name_what_there_is() -> None:
    net = NETS["unet"]
    with pytest.raises(ValueError, match="registered twice"):
        Registry[DiffusionNet]("diffusion network", (net, net))
    with pytest.raises(UnknownPart, match="unet"):
        _ = NETS["no-such-net"]


def test_every_part_is_its_protocol_and_found_in_a_package() -> None:
    assert {"unet", "mmdit", "flux", "chroma", "pixart"} <= set(NETS.ids())
    assert {"sd1", "sd2", "sdxl", "sdxl_refiner", "sd3", "flux", "pixart_t5"} <= set(TEXTS.ids())
    assert {"kl-vae", "flux2-vae", "wan-vae"} <= set(CODECS.ids())
    names = {p.__name__.rsplit(".", 1)[-1] for p in packages()}
    assert names >= {"unet", "mmdit", "flux", "chroma", "pixart", "kl_vae", "wan_vae"}
    for kind, parts in ((DiffusionNet, NETS), (TextConvention, TEXTS), (LatentCodec, CODECS)):
        for part in parts:  # every member the protocol declares is there
            missing = [m for m in _members(kind) if not hasattr(part, m)]
            assert not missing, (part.id, missing)


def _members(protocol: type) -> list[str]:
    return [m for m in vars(protocol) if not m.startswith("_")]


def test_a_module_finds_its_network_and_codec_and_a_stranger_is_refused() -> None:
    arch = NETS["pixart"].architecture
    cfg = arch.configure({k: tuple(v.shape) for k, v in _pixart_meta_state().items()}, "pixart-sigma")
    assert net_of(arch.build(cfg, "meta", None)).id == "pixart"
    assert codec_of(torch.nn.Linear(2, 2)) is None
    with pytest.raises(ModelMismatchError) as err:
        net_of(torch.nn.Linear(2, 2))
    assert err.value.code == "wrong_kind" and "PixArt" in (err.value.fix or "")


def _pixart_meta_state() -> dict[str, torch.Tensor]:
    from core.archs.pixart.network import PixArt, PixArtConfig

    return PixArt(PixArtConfig(hidden_size=32, depth=1, context_dim=16), device="meta").state_dict()


#: record fields of other vocabularies spelled like a part (the "flux" schedule, the "sd1" format)
OTHER_VOCABULARIES = {"schedule", "beta_schedule", "latent_format", "unet_preset", "network_preset"}


def _other_vocabulary(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in OTHER_VOCABULARIES


def _chains(path: Path, names: set[str]) -> list[str]:
    """``x == "flux"``, ``kind in ("unet", "mmdit")``, ``isinstance(m, Flux)`` ... in one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare) and not _other_vocabulary(node.left):
            for side in (node.left, *node.comparators):
                consts = side.elts if isinstance(side, ast.Tuple | ast.Set | ast.List) else [side]
                hits = [c.value for c in consts if isinstance(c, ast.Constant) and c.value in names]
                if hits:
                    found.append(f"{path.relative_to(CORE)}:{node.lineno}: compares with {hits}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            classes = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
            words = set(
                classes.replace("|", " ").replace(",", " ").replace("(", " ").replace(")", " ").split()
            )
            hits = sorted(PART_CLASSES & words)
            if hits:
                found.append(f"{path.relative_to(CORE)}:{node.lineno}: isinstance {hits}")
    return found


def test_no_shared_file_branches_on_a_part() -> None:
    names = set(NETS.ids()) | set(TEXTS.ids()) | set(CODECS.ids())
    names |= {m for net in NETS for m in net.memory}
    assert {"unet", "pixart_t5", "kl-vae", "sdxl"} <= names  # the test can see something
    found = [hit for path in SHARED for hit in _chains(path, names)]
    assert not found, "a part's knowledge belongs in its package (core/archs/<arch>):\n" + "\n".join(found)


def test_the_scan_sees_the_chains_the_old_shared_files_had(tmp_path: Path) -> None:
    """The conventions as main's sampling/network.py, models/kinds.py and text/conditioning.py
    branched on them: each is found."""
    text = (
        'if self.kind in ("unet", "mmdit"):\n    pass\n'
        'if family == "sdxl":\n    pass\n'
        "if isinstance(model, UNetModel):\n    pass\n"
        "if isinstance(config, MMDiTConfig | FluxConfig):\n    pass\n"
    )
    path = CORE / "_scan_probe.py"
    assert not path.exists()
    path.write_text(text, encoding="utf-8")
    try:
        hits = _chains(path, {"unet", "mmdit", "sdxl"})
    finally:
        path.unlink()
    assert [h.split(": ", 1)[1] for h in hits] == [
        "compares with ['unet', 'mmdit']",
        "compares with ['sdxl']",
        "isinstance ['UNetModel']",
        "isinstance ['FluxConfig', 'MMDiTConfig']",
    ]


def test_shared_files_reach_packages_through_the_catalog() -> None:
    found = []
    for path in SHARED:
        rel = path.relative_to(CORE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("core.archs."):
                top = node.module.split(".")[2]
                if (CORE / "archs" / top).is_dir() and rel not in DIRECT_IMPORTS:
                    found.append(f"{rel}:{node.lineno}: {node.module}")
    assert not found, "read a package through core.archs.catalog:\n" + "\n".join(found)
