"""Every name an adapter file may use for one weight of a loaded component.

A component's module keys are in the layout Loadout builds its networks in: the original release
layout for the UNet, MMDiT and Flux (``input_blocks...``, ``joint_blocks...``, ``double_blocks...``),
transformers' layout for CLIP and T5. Adapter files name the same layers in several ways; a
:class:`KeyIndex` answers all of them from one table of dotted module paths:

- the module's own paths (``input_blocks.4.1.transformer_blocks.0.attn2.to_k``);
- for a diffusion network, the names its architecture package gives in ``adapter_keys``
  (diffusers paths: ``down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k``). Where the
  original fuses several diffusers weights (``qkv`` = to_q, to_k, to_v; PixArt's ``kv_linear`` =
  to_k, to_v; Flux single blocks' ``linear1`` = to_q, to_k, to_v, proj_mlp) each diffusers path
  lands on a slice ``(0, start, length)`` of the fused weight;
- every path above with its dots as underscores, for kohya-style names, which lose their dots
  (``lora_unet_down_blocks_0_attentions_0_proj_in``): the lookup never depends on how well the dots
  were put back.

Everything here is pure: shapes and configs in, names out, no tensor data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core.archs.catalog import NETS
from core.archs.keymaps import KeyMapping
from core.detect.catalog import REGISTRY

#: ``(dim, start, length)``: the part of a fused weight one adapter module patches.
Offset = tuple[int, int, int]
Shape = tuple[int, ...]

DIFFUSION = "diffusion_model"
TEXT_ENCODER = "text_encoder"

#: Diffusers projections fused into an original ``qkv`` / ``linear1``; each is ``hidden`` rows.
_ATTENTION_PARTS = frozenset({"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj"})
#: Parameter names that end a module path, in order of preference (Flux norms keep ``scale``).
_PARAM_SUFFIXES = (".weight", ".scale")


@dataclass(frozen=True)
class Target:
    """Where one adapter module lands: a weight of one component, or a slice of it.

    ``component`` is ``"diffusion_model"`` or ``"text_encoder:<family>"`` (``text_encoder:clip-g``);
    ``key`` is the module-layout weight key (``input_blocks.4.1.transformer_blocks.0.attn2.to_k.weight``);
    ``offset`` is ``(dim, start, length)`` when the adapter patches only part of a fused weight.
    ``swap_halves``: the diffusers weight the adapter was trained on stores its two halves along
    dim 0 in the other order (the final adaLN layers: [scale, shift] vs the original [shift, scale]),
    so the adapter's difference must have its halves swapped before it is added.
    ``pad_to``: the shape the weight is widened to (zeros) before the adapter's change is added (a
    FLUX.1 control LoRA's img_in: ComfyUI's ``reshape_weight``).
    """

    component: str
    key: str
    offset: Offset | None = None
    swap_halves: bool = False
    pad_to: Shape | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"component": self.component, "key": self.key}
        if self.offset is not None:
            out["offset"] = list(self.offset)
        if self.swap_halves:
            out["swap_halves"] = True
        return out


@dataclass(frozen=True)
class KeyIndex:
    """Everything needed to resolve adapter module paths onto one component's weights."""

    component: str
    role: str
    family: str
    shapes: Mapping[str, Shape]  # module-layout key -> shape
    paths: Mapping[str, Target]  # dotted module path (module or diffusers layout) -> target
    flat: Mapping[str, Target]  # the same paths with every "." as "_" (ambiguous ones left out)

    def resolve(self, path: str) -> Target | None:
        """The target of a dotted module path as an adapter file spells it, or None."""
        hit = self.paths.get(path)
        if hit is None:
            hit = self.flat.get(path.replace(".", "_"))
        return hit

    def shape_of(self, target: Target) -> Shape:
        """The shape an adapter on ``target`` must produce: the weight's, or its slice's."""
        shape = self.shapes[target.key]
        if target.offset is None:
            return shape
        dim, _, length = target.offset
        return (*shape[:dim], length, *shape[dim + 1 :])


def component_name(role: str, family: str) -> str:
    return DIFFUSION if role == DIFFUSION else f"{role}:{family}"


def _own_paths(component: str, shapes: Mapping[str, Shape]) -> dict[str, Target]:
    out: dict[str, Target] = {}
    for suffix in _PARAM_SUFFIXES:
        for key in shapes:
            if key.endswith(suffix):
                out.setdefault(key[: -len(suffix)], Target(component, key))
    return out


def _part_sizes(parts: tuple[str, ...], shape: Shape) -> list[int] | None:
    """Rows of the fused weight each diffusers part fills (q, k, v: ``hidden`` rows each; with
    grouped kv heads q ``hidden`` rows and k, v half the rest each)."""
    if len(shape) < 2:
        return None
    names = [p.removesuffix(".weight").rsplit(".", 1)[-1] for p in parts]
    if names == ["to_q", "to_k", "to_v"] and shape[0] > shape[1] and (shape[0] - shape[1]) % 2 == 0:
        kv = (shape[0] - shape[1]) // 2  # grouped kv heads (Lumina 2): k and v narrower than q
        return [shape[1], kv, kv]
    attention = sum(n in _ATTENTION_PARTS for n in names)
    others = len(names) - attention
    rest = shape[0] - attention * shape[1]
    if others == 0 and rest == 0:
        return [shape[1]] * len(names)
    if others and rest > 0 and rest % others == 0:
        return [shape[1] if n in _ATTENTION_PARTS else rest // others for n in names]
    if shape[0] % len(names) == 0:  # no attention parts, or not hidden-wide: equal shares
        return [shape[0] // len(names)] * len(names)
    return None


def _mapped_paths(
    component: str, shapes: Mapping[str, Shape], rows: Iterable[KeyMapping]
) -> dict[str, Target]:
    out: dict[str, Target] = {}
    for row in rows:
        shape = shapes.get(row.original)
        if shape is None or not all(p.endswith(_PARAM_SUFFIXES) for p in row.diffusers):
            continue
        paths = [p.rsplit(".", 1)[0] for p in row.diffusers]
        if len(paths) == 1:
            out[paths[0]] = Target(component, row.original, swap_halves=row.swap_halves)
            continue
        sizes = _part_sizes(row.diffusers, shape)
        if sizes is None or row.swap_halves:
            continue
        start = 0
        for path, size in zip(paths, sizes, strict=True):
            out[path] = Target(component, row.original, (0, start, size))
            start += size
    return out


def _diffusers_paths(
    component: str, shapes: Mapping[str, Shape], family: str, config: Any
) -> dict[str, Target]:
    """The other names adapter files give a diffusion network's weights (its package's
    ``adapter_keys``); text encoders: adapter files use the module's own (transformers) names."""
    fam = REGISTRY.get(family)
    net_id = fam.diffusion.network if fam is not None and fam.diffusion is not None else None
    if config is None or net_id is None or net_id not in NETS:
        return {}
    return _mapped_paths(component, shapes, NETS[net_id].adapter_keys(config))


def _encoder_paths(paths: Mapping[str, Target]) -> dict[str, Target]:
    """A decoder LLM's weights as adapters on its bare model name them: diffusers saves a text
    encoder's PEFT names from ``Qwen3Model`` (``layers.0.self_attn.q_proj``), where the module and
    a ``*ForCausalLM`` say ``model.layers.0...``."""
    return {p[len("model.") :]: t for p, t in paths.items() if p.startswith("model.layers.")}


def _flatten(paths: Mapping[str, Target]) -> dict[str, Target]:
    flat: dict[str, Target] = {}
    clash: set[str] = set()
    for path, target in paths.items():
        key = path.replace(".", "_")
        seen = flat.setdefault(key, target)
        if seen != target:
            clash.add(key)
    for key in clash:
        del flat[key]
    return flat


def model_key_index(
    role: str, family: str, module_keys: Mapping[str, Shape], config: Any, *, component: str | None = None
) -> KeyIndex:
    """The name index of one component: its module-layout key shapes and its network config."""
    name = component or component_name(role, family)
    shapes = {k: tuple(v) for k, v in module_keys.items()}
    paths = _own_paths(name, shapes)
    extra = _diffusers_paths(name, shapes, family, config) if role == DIFFUSION else _encoder_paths(paths)
    for path, target in extra.items():
        paths.setdefault(path, target)
    return KeyIndex(name, role, family, shapes, paths, _flatten(paths))
