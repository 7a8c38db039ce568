"""A stack of LoRAs (and LyCORIS & co.) on a loaded model.

``LoraStack`` owns one :class:`ModelPatcher` per component (diffusion model, each text encoder).
Adding a file reads its header, checks the family it was made for, maps its modules onto the
model's keys, reads only the factor tensors of matched modules and records them as patches:
nothing is baked until ``apply()``. Every strength change, toggle, reorder or removal is then
applied incrementally (only the keys it touches are recomputed).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from core.archs.blocks import BASE
from core.archs.catalog import blocks_for
from core.detect.catalog import REGISTRY, lora_fits
from core.detect.keyview import KeyView
from core.detect.lora import LoraAnalysis, LoraModule, analyze_lora
from core.detect.lora_flux_control import BASE as CONTROL_BASE
from core.detect.lora_flux_control import PLAIN_INPUTS
from core.detect.lora_qwen_control import marked as context_control
from core.errors import FileFormatError, LoadoutError, ModelMismatchError
from core.files.model_file import read_tensor_index
from core.files.pickle_safe import load_pickle_state_dict
from core.files.safetensors import SafetensorsFile
from core.loading.loader import LoadedComponent
from core.patching.adapters import AdapterFormatError, NonFiniteAdapterError, module_adapters
from core.patching.block_weights import BlockWeights, key_scales, resolve
from core.patching.keymap import KeyIndex, MatchReport, Target, match_lora, model_key_index
from core.patching.patcher import ApplyReport, KeyPatch, ModelPatcher
from core.patching.prompt_target import check_target
from core.patching.side import clear_side_outputs


def compatible(lora_family: str | None, model_family: str) -> bool:
    """Whether a LoRA made for ``lora_family`` fits ``model_family`` (family data, see
    :func:`core.detect.catalog.lora_fits`)."""
    return lora_fits(lora_family, model_family)


def _title(family: str | None) -> str:
    fam = REGISTRY.get(family) if family else None
    return fam.title if fam is not None else (family or "an unknown model")


def component_name(comp: LoadedComponent) -> str:
    return "diffusion_model" if comp.role == "diffusion_model" else f"text_encoder:{comp.family}"


@dataclass
class LoraEntry:
    id: str
    path: Path
    analysis: LoraAnalysis
    report: MatchReport
    model_strength: float
    clip_strength: float
    enabled: bool = True
    skipped: list[str] = field(default_factory=list)  # "module: why" for matched modules not applied
    keys: dict[str, list[str]] = field(default_factory=dict)  # component -> patched weight keys
    block_weights: BlockWeights | None = None  # LoRA block weights (None: the same strength everywhere)
    #: the prompt it acts on only, both parts (core.patching.prompt_target; None: everywhere)
    on: str | None = None

    @property
    def base_family(self) -> str | None:
        return self.analysis.base_family


def _swap_rows(t: torch.Tensor) -> torch.Tensor:
    half = t.shape[0] // 2
    return torch.cat([t[half:], t[:half]], dim=0)


def _factors(
    module: LoraModule, get: Callable[[str], torch.Tensor], target: Target
) -> dict[str, torch.Tensor]:
    factors: dict[str, torch.Tensor] = {}
    for part, key in module.keys:
        if part in ("up_bias", "on_input"):
            raise AdapterFormatError(
                f"module {module.name} has a {part!r} part",
                why="it is not supported",
                code="unsupported_adapter",
            )
        name = "lora_magnitude_vector" if part == "dora_scale" and module.format == "peft" else part
        factors[name] = get(key)
    if target.swap_halves:
        # diffusers stores [scale, shift] where the original has [shift, scale]: swapping the rows
        # of the output factor swaps the halves of the change.
        if "up" in factors and "mid" not in factors and "lora_magnitude_vector" not in factors:
            factors["up"] = _swap_rows(factors["up"])
        elif set(factors) <= {"diff", "diff_b", "alpha"}:
            factors = {k: _swap_rows(v) if k in ("diff", "diff_b") else v for k, v in factors.items()}
        else:
            raise AdapterFormatError(
                f"module {module.name} patches a half-swapped layer with {module.algorithm}",
                why="only plain LoRA and full diffs can be re-ordered onto that layer",
                code="unsupported_adapter",
            )
    return factors


def refuse_other_family(path: Path, analysis: LoraAnalysis, model_family: str | None, force: bool) -> None:
    """Raise unless the adapter was made for ``model_family`` (or ``force``)."""
    if model_family and not compatible(analysis.base_family, model_family) and not force:
        lora_for, model_is = _title(analysis.base_family), _title(model_family)
        raise ModelMismatchError(
            f"{path.name}: this LoRA targets {lora_for}; the loaded model is {model_is}",
            why=analysis.base_evidence or "its shapes were made for another model",
            fix="Pick a LoRA made for this model, or apply what fits anyway (forced)",
            code="lora_family_mismatch",
        )


def read_patches(
    path: Path, fmt: str, analysis: LoraAnalysis, report: MatchReport, skipped: list[str]
) -> dict[str, dict[str, list[KeyPatch]]]:
    """The patches of ``report``'s matched modules, per component and weight key; reads only their
    factors. Refuses the file when a factor is not finite; a module that cannot be applied is
    named in ``skipped`` ("module: why")."""
    if fmt == "safetensors":
        get: Callable[[str], torch.Tensor] = SafetensorsFile(path).tensor
    elif fmt == "pickle":
        get = load_pickle_state_dict(path).__getitem__
    else:
        raise FileFormatError(f"{path.name}: {fmt} adapters cannot be applied", code="unsupported_format")
    modules = {m.name: m for m in analysis.modules}
    out: dict[str, dict[str, list[KeyPatch]]] = {}
    for name, target in report.matched.items():
        module = modules[name]
        try:
            adapters = module_adapters(_factors(module, get, target), module=name)
        except NonFiniteAdapterError as exc:
            raise NonFiniteAdapterError(
                f"{path.name} was refused: {exc.what}",
                why="a LoRA with NaN or infinite values would destroy the model's weights",
                fix="Get the file again, or use another version of it",
                code="nonfinite_adapter",
            ) from None
        except (AdapterFormatError, ModelMismatchError, LoadoutError) as exc:
            skipped.append(f"{name}: {exc.message}")
            continue
        per_key = out.setdefault(target.component, {})
        if adapters.weight is not None:
            per_key.setdefault(target.key, []).append(
                KeyPatch(adapters.weight, target.offset, pad_to=target.pad_to)
            )
        if adapters.bias is not None and target.key.endswith(".weight"):
            bias_key = target.key[: -len("weight")] + "bias"
            offset = (0, target.offset[1], target.offset[2]) if target.offset else None
            per_key.setdefault(bias_key, []).append(KeyPatch(adapters.bias, offset))
    return out


class LoraStack:
    """LoRAs on the components of one loaded model, each with model and text-encoder strengths."""

    def __init__(self, components: Sequence[LoadedComponent]) -> None:
        self.components = {component_name(c): c for c in components}
        self.patchers = {name: ModelPatcher(c.module) for name, c in self.components.items()}
        self._indexes: list[KeyIndex] = [
            model_key_index(
                c.role,
                c.family,
                {k: tuple(v.shape) for k, v in c.module.state_dict(keep_vars=True).items()},
                c.config,
                component=name,
            )
            for name, c in self.components.items()
        ]
        self.entries: dict[str, LoraEntry] = {}
        diffusion = self.components.get("diffusion_model")
        self.model_family = diffusion.family if diffusion else None

    # -- adding ----------------------------------------------------------------------------------
    def add(
        self,
        path: str | os.PathLike[str],
        model_strength: float = 1.0,
        clip_strength: float | None = None,
        *,
        force: bool = False,
        entry_id: str | None = None,
        block_weights: BlockWeights | None = None,
        on: str | None = None,
    ) -> LoraEntry:
        """Add a file on top of the stack; ``block_weights`` scale its strength per block of the
        diffusion model (and its text-encoder part by ``BASE``); ``on`` the prompt it acts on
        only (a generation's hook groups apply it: the weights here are the stack's)."""
        p = Path(path)
        on = check_target(on)
        weights = self._block_weights(block_weights)
        index = read_tensor_index(p)
        meta = {k: v for k, v in index.metadata.items() if isinstance(v, str)}
        analysis = analyze_lora(KeyView(index.tensors), meta)
        analysis = context_control(analysis, p) if analysis is not None else None
        if analysis is None:
            raise ModelMismatchError(
                f"{p.name} is not a LoRA or other adapter file",
                why="none of its keys name adapter factors",
                fix="Run `loadout inspect` on it to see what it is",
                code="wrong_kind",
            )
        refuse_other_family(p, analysis, self.model_family, force)
        self._check_control(p, analysis)
        report = match_lora(analysis, self._indexes)
        ident = entry_id or self._new_id(p.stem)
        entry = LoraEntry(
            ident,
            p,
            analysis,
            report,
            float(model_strength),
            float(model_strength if clip_strength is None else clip_strength),
            block_weights=block_weights,
            on=on,
        )
        patches = read_patches(p, index.format, analysis, report, entry.skipped)
        for name, per_key in patches.items():
            strength = entry.model_strength if name == "diffusion_model" else entry.clip_strength
            scales = self._scales(name, per_key, weights)
            entry.keys[name] = self.patchers[name].add_patches(ident, per_key, strength, scales)
        self.entries[ident] = entry
        return entry

    def _check_control(self, path: Path, analysis: LoraAnalysis) -> None:
        """A FLUX.1 control LoRA goes on FLUX.1 [dev] as it is (img_in 64 wide), once."""
        wide = analysis.control_inputs
        if wide is None:
            return
        shape = self._input_shape()
        if self.model_family != CONTROL_BASE or shape is None:
            raise ModelMismatchError(
                f"{path.name} is a FLUX.1 control LoRA; the loaded model is {_title(self.model_family)}",
                why="a control LoRA widens FLUX.1 [dev]'s input layer to take a control picture",
                fix="Load FLUX.1 [dev] to use it",
                code="lora_family_mismatch",
            )
        if shape[1] != PLAIN_INPUTS:
            raise ModelMismatchError(
                f"{path.name} is a FLUX.1 control LoRA, and the loaded model already takes a control picture",
                why=f"its input layer is {shape[1]} wide (FLUX.1 Canny/Depth [dev] or Fill), not 64",
                fix="Use the control LoRA on plain FLUX.1 [dev], or the Canny/Depth model alone",
                code="lora_family_mismatch",
            )
        others = [e.path.name for e in self.entries.values() if e.analysis.control_inputs]
        if others:
            raise ModelMismatchError(
                f"{path.name} is a FLUX.1 control LoRA, and {others[0]} is one already",
                why=f"both would widen FLUX.1 [dev]'s input layer to {wide} for one control picture",
                fix="Use one control LoRA at a time",
                code="lora_family_mismatch",
            )

    def _input_shape(self) -> tuple[int, ...] | None:
        index = next((i for i in self._indexes if i.component == "diffusion_model"), None)
        return None if index is None else index.shapes.get("img_in.weight")

    def _block_weights(self, weights: BlockWeights | None) -> dict[str, float] | None:
        """Block name -> weight for this model (refused in words before anything is read)."""
        if weights is None:
            return None
        table = blocks_for(self.model_family)
        return resolve(weights, table.lbw if table else None, _title(self.model_family))

    def _scales(
        self, name: str, keys: Mapping[str, object], weights: dict[str, float] | None
    ) -> dict[str, float]:
        if weights is None:
            return {}
        if name != "diffusion_model":
            return dict.fromkeys(keys, weights[BASE])
        table = blocks_for(self.model_family)
        assert table is not None and table.lbw is not None
        return key_scales(keys, weights, table.lbw)

    def _new_id(self, stem: str) -> str:
        ident, n = stem, 2
        while ident in self.entries:
            ident, n = f"{stem} ({n})", n + 1
        return ident

    # -- changing ----------------------------------------------------------------------------------
    def set_strength(self, entry_id: str, model: float | None = None, clip: float | None = None) -> None:
        entry = self.entries[entry_id]
        if model is not None:
            entry.model_strength = float(model)
        if clip is not None:
            entry.clip_strength = float(clip)
        for name in entry.keys:
            strength = entry.model_strength if name == "diffusion_model" else entry.clip_strength
            self.patchers[name].set_strength(entry_id, strength)

    def set_on(self, entry_id: str, on: str | None) -> None:
        """The prompt a LoRA acts on only (None: everywhere); the weights stay the stack's."""
        self.entries[entry_id].on = check_target(on)

    def set_block_weights(self, entry_id: str, weights: BlockWeights | None) -> None:
        """New block weights of a LoRA (None: one strength everywhere); ``apply()`` bakes them.
        Refused in words, the stack unchanged, when the model has no such blocks."""
        entry = self.entries[entry_id]
        resolved = self._block_weights(weights)
        for name, keys in entry.keys.items():
            self.patchers[name].set_scales(entry_id, self._scales(name, dict.fromkeys(keys), resolved))
        entry.block_weights = weights

    def set_enabled(self, entry_id: str, enabled: bool) -> None:
        self.entries[entry_id].enabled = enabled
        for name in self.entries[entry_id].keys:
            self.patchers[name].set_enabled(entry_id, enabled)

    def remove(self, entry_id: str) -> None:
        entry = self.entries.pop(entry_id)
        for name in entry.keys:
            self.patchers[name].remove(entry_id)

    def reorder(self, order: Sequence[str]) -> None:
        if sorted(order) != sorted(self.entries):
            raise ValueError("the new order must name every LoRA once")
        self.entries = {k: self.entries[k] for k in order}
        for name, patcher in self.patchers.items():
            patcher.reorder([k for k in order if name in self.entries[k].keys])

    def preview(self) -> bool:
        """Show the recorded strengths at once through low-rank side paths (a slider moving);
        False when some change needs a bake (non-LoRA adapters, a removed LoRA): call apply()."""
        ok = all(p.preview() for p in self.patchers.values())
        if not ok:
            for patcher in self.patchers.values():
                clear_side_outputs(patcher.model)
        return ok

    def apply(self) -> dict[str, ApplyReport]:
        """Bake the stack into the weights (only the keys whose stack changed)."""
        return {name: patcher.apply() for name, patcher in self.patchers.items()}

    def unpatch(self) -> None:
        for patcher in self.patchers.values():
            patcher.unpatch()

    def summary(self) -> Mapping[str, object]:
        return {
            e.id: {
                "path": str(e.path),
                "base_family": e.base_family,
                "model_strength": e.model_strength,
                "clip_strength": e.clip_strength,
                "enabled": e.enabled,
                "block_weights": e.block_weights.text() if e.block_weights else None,
                "on": e.on,
                "matched": len(e.report.matched),
                "unmatched": len(e.report.unmatched),
                "skipped": len(e.skipped),
            }
            for e in self.entries.values()
        }
