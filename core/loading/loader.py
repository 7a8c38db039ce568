"""Loading model files into working networks.

``load_checkpoint`` turns an all-in-one file into a :class:`ModelBundle`; ``load_diffusion_model``,
``load_vae`` and ``load_text_encoder`` load component files (ComfyUI's ``diffusion_models/``,
``vae/``, ``text_encoders/``). Each component is planned first (network and keys checked on the
meta device, no data read), then filled tensor by tensor from the memory map: zero copies where
the dtype already matches, progress per tensor, and the interrupt check between tensors.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core.detect.detector import detect
from core.detect.keyview import KeyView
from core.detect.types import Component, Detection, Role, kind_phrase
from core.errors import FileFormatError, ModelMismatchError
from core.files.gguf_data import GGUFTensors
from core.files.gguf_llm import unpermute_rows
from core.files.model_file import TensorIndex, read_tensor_index
from core.files.pickle_safe import load_pickle_state_dict
from core.files.safetensors import SafetensorsFile
from core.loading.assign import LoadProgress, assign_weights
from core.loading.plan import ComponentPlan, LazyTensors, mismatch_error, plan_component
from core.ops.fp8 import use_fp8_matmul
from core.quant.gguf_types import DEQUANTIZABLE, PLAIN_DTYPES
from core.quant.scaled_fp8 import fold, layout_of, scaled_reader


@dataclass(frozen=True)
class LoadOptions:
    dtype: torch.dtype | None = None  # None: keep each tensor's stored dtype (zero-copy)
    device: str = "cpu"
    progress: Callable[[LoadProgress], None] | None = None
    check: Callable[[], None] | None = None  # raises to stop (the interrupt flag)
    #: what is already known of the file, so a load reads its header once and detects it once:
    #: ``index`` read just before (``inspect_for_loading``), ``detection`` made for the file in
    #: its current state (the library index's, when the file is unchanged since its scan)
    index: TensorIndex | None = None
    detection: Detection | None = None
    #: build the diffusion network from ``fp8_matmul_ops`` (its Linear weights e4m3fn, quantized
    #: with a per-tensor scale when stored wider): the dtype policy's fp8 compute decision
    fp8_matmul: bool = False


@dataclass
class LoadedComponent:
    role: Role
    family: str
    prefix: str  # where its keys live in the source file ("" for a component file)
    layout: str  # key naming in the source file
    module: nn.Module
    config: Any
    plan: ComponentPlan

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.module.state_dict().values())


@dataclass
class ModelBundle:
    """What one file held, loaded: the diffusion model, text encoders and VAE (each optional)."""

    path: Path
    detection: Detection
    metadata: dict[str, str]
    diffusion_model: LoadedComponent | None = None
    text_encoders: list[LoadedComponent] = field(default_factory=list)
    vae: LoadedComponent | None = None
    #: file tensors that belong to no component (scheduler buffers, position ids...), kept lazily
    #: so that saving writes them back and a round trip loses nothing
    extras: dict[str, Callable[[], torch.Tensor]] = field(default_factory=dict)

    @property
    def components(self) -> list[LoadedComponent]:
        found = [self.diffusion_model, *self.text_encoders, self.vae]
        return [c for c in found if c is not None]


def _refuse_unloadable_format(index: TensorIndex) -> None:
    """Refuse, before any data is read, a GGUF file holding a quantization Loadout cannot read."""
    if index.format != "gguf":
        return
    bad = sorted({t.dtype for t in index.tensors.values()} - DEQUANTIZABLE - set(PLAIN_DTYPES))
    if bad:
        raise FileFormatError(
            f"{index.path.name} holds {', '.join(bad)} tensors, which Loadout cannot dequantize",
            why=f"supported GGUF types are F32/F16/BF16 and {', '.join(sorted(DEQUANTIZABLE))}",
            fix="Use a file quantized to one of those (Q8_0, Q6_K, Q5_K, Q4_K... are common)",
            code="unsupported_format",
        )


class _Source:
    """Tensors of one file, by full key."""

    def __init__(self, index: TensorIndex) -> None:
        self.index = index
        name = index.path.name
        if index.format == "safetensors":
            shards: dict[str, Path] | None = index.extra.get("shards")
            if shards is None:
                self._file: SafetensorsFile | None = SafetensorsFile(index.path, header=index.header)
                self.get: Callable[[str], torch.Tensor] = self._file.tensor
            else:  # a split model: each key from its shard's own mapping
                self._file = None
                files = {p: SafetensorsFile(p) for p in index.extra["shard_files"]}
                self.get = lambda key: files[shards[key]].tensor(key)
            scaled = layout_of(index)
            if scaled is not None:  # fp8 weights with a scale: kept fp8, scaled at forward
                self.get = scaled_reader(self.get, scaled, name)
        elif index.format == "gguf":
            _refuse_unloadable_format(index)
            self._file = None
            gguf = GGUFTensors(index.path)
            names: dict[str, str] = index.extra.get("gguf_names", {})  # T5, LLMs: ours -> llama.cpp's
            plus_one = frozenset(index.extra.get("gguf_plus_one", ()))  # Gemma norms stored as 1 + w
            heads: dict[str, int] = index.extra.get("gguf_qk_heads", {})  # Llama/Mistral q, k rows

            def read(key: str) -> torch.Tensor:
                t = gguf.tensor(names.get(key, key))
                if key in heads:
                    t = unpermute_rows(t, heads[key])
                return t.float() - 1.0 if key in plus_one else t

            self.get = read
        elif index.format == "pickle":
            self._file = None
            tensors = load_pickle_state_dict(index.path)
            self.get = tensors.__getitem__
        else:
            _refuse_unloadable_format(index)
            raise FileFormatError(f"{name}: unknown format {index.format}", code="unsupported_format")


def _view(index: TensorIndex, comp: Component) -> KeyView:
    whole = KeyView(index.tensors)
    if comp.prefix:
        return whole.sub(comp.prefix)
    if comp.exclude:
        return KeyView({k: v for k, v in index.tensors.items() if not k.startswith(comp.exclude)})
    return whole


def _plan(index: TensorIndex, comp: Component) -> ComponentPlan:
    """Plan one component and refuse it when its keys do not match (reads no data)."""
    name = index.path.name
    view = _view(index, comp)
    plan = plan_component(view, comp.role, comp.family, comp.layout, prefix=comp.prefix, name=name)
    if not plan.report.ok:
        raise mismatch_error(plan, name)
    return plan


def _load_component(
    source: _Source, index: TensorIndex, comp: Component, plan: ComponentPlan, options: LoadOptions
) -> LoadedComponent:
    view = _view(index, comp)
    real = plan.architecture.convert_in(
        LazyTensors(list(view), source.get, comp.prefix), comp.layout, comp.family
    )
    module = plan.module
    keys = {k: k for k in module.state_dict(keep_vars=True)}
    assign_weights(
        module,
        real.__getitem__,
        keys,
        component=f"{comp.role} ({comp.family})",
        dtype=options.dtype,
        device=options.device,
        check=options.check,
        progress=options.progress,
    )
    if comp.role == "diffusion_model" and options.fp8_matmul:
        use_fp8_matmul(module, options.check)
    module.eval()
    return LoadedComponent(comp.role, comp.family, comp.prefix, comp.layout, module, plan.config, plan)


def inspect_for_loading(
    path: str | os.PathLike[str], options: LoadOptions | None = None
) -> tuple[TensorIndex, Detection]:
    """The file's tensor index and detection: those in ``options`` when it has them (the header is
    then not read again, the file not detected again), else read and detected now. Detection sees
    every key; the index returned has a scaled fp8 file's scale and marker keys folded away
    (``core.quant.scaled_fp8``), so planning and loading see the network's own keys."""
    index = options.index if options is not None and options.index is not None else None
    if index is None or index.path != Path(path):
        index = read_tensor_index(path)
    det = options.detection if options is not None else None
    if det is None:
        meta = {k: v for k, v in index.metadata.items() if isinstance(v, str)}
        det = detect(index.tensors, meta, index.path.name)
    return fold(index), det


_WHERE = {
    "lora": "add it to the LoRA stack of a loaded model instead",
    "embedding": "it is a textual-inversion embedding: use it in a prompt of a loaded model",
    "controlnet": "ControlNets load beside a model, not as one",
    "upscale_model": "upscalers are not diffusion models",
    "preprocessor_model": "it makes ControlNet hints from pictures: use it with its preprocessor",
    "image_encoder": "image encoders read the pictures of image prompts: give it as the image encoder",
    "ip_adapter": "IP-Adapters give a picture to an SD1.5 or SDXL model: give it with a picture",
    "style_model": "style models (FLUX Redux) turn a picture into prompt tokens: give it with a picture",
    "vae": "give it as the VAE beside a checkpoint or diffusion model",
    "text_encoder": "give it as a text encoder beside a diffusion model",
    "diffusion_model": "load it as a diffusion model, and add a VAE and text encoders from separate files",
    "unknown": "run `loadout inspect` on it to see what it holds",
}


def _wrong_kind(name: str, det: Detection, wanted: str) -> ModelMismatchError:
    fam = (
        f" for {det.family}"
        if det.family and det.kind in ("lora", "controlnet", "embedding")
        else (f" ({det.family})" if det.family else "")
    )
    return ModelMismatchError(
        f"{name} is {kind_phrase(det.kind)}{fam}, not {kind_phrase(wanted)}",
        why=f"{kind_phrase(wanted)} was expected here",
        fix=_WHERE.get(det.kind, "pick another file"),
        code="wrong_kind",
    )


def _checkpoint_plans(index: TensorIndex, det: Detection) -> list[ComponentPlan]:
    """Every refusal of loading ``index`` as a checkpoint, before any data is read; its plans."""
    name = index.path.name
    if det.kind != "checkpoint":
        raise _wrong_kind(name, det, "checkpoint")
    _refuse_unloadable_format(index)
    unknown = [c for c in det.components if c.family == "unknown"]
    if unknown:
        part = unknown[0].role.replace("_", " ")
        raise ModelMismatchError(
            f"{name}: the {part} under '{unknown[0].prefix}' is not a known model",
            why="its keys match no family Loadout knows",
            fix="Run `loadout inspect` on the file for details",
            code="unknown_component",
        )
    return [_plan(index, comp) for comp in det.components]


def load_checkpoint(path: str | os.PathLike[str], options: LoadOptions | None = None) -> ModelBundle:
    """Load an all-in-one checkpoint: every component it holds."""
    opts = options or LoadOptions()
    index, det = inspect_for_loading(path, opts)
    # Plan every component before reading any data: a bad file fails fast and loads nothing.
    plans = _checkpoint_plans(index, det)
    source = _Source(index)
    bundle = ModelBundle(index.path, det, {k: v for k, v in index.metadata.items() if isinstance(v, str)})
    used: set[str] = set()
    for comp, plan in zip(det.components, plans, strict=True):
        loaded = _load_component(source, index, comp, plan, opts)
        used.update(_consumed(index, comp, loaded))
        if comp.role == "diffusion_model":
            bundle.diffusion_model = loaded
        elif comp.role == "vae":
            bundle.vae = loaded
        else:
            bundle.text_encoders.append(loaded)
    for key in index.tensors:
        if key not in used:
            bundle.extras[key] = _getter(source, key)
    return bundle


def _consumed(index: TensorIndex, comp: Component, loaded: LoadedComponent) -> set[str]:
    """File keys (with prefix) that went into the component's module.

    With the original layout that is exactly the module's keys; a converted layout (open_clip,
    diffusers) consumes every key it maps, which is all of the component's keys but the known
    harmless extras (CLIP's ``logit_scale``, ``position_ids``...), which stay extras."""
    view = _view(index, comp)
    arch = loaded.plan.architecture
    if comp.layout in arch.to_module:
        return {comp.prefix + k for k in view if k not in arch.harmless}
    module_keys = set(loaded.module.state_dict(keep_vars=True))
    return {comp.prefix + k for k in view if k in module_keys}


def _getter(source: _Source, key: str) -> Callable[[], torch.Tensor]:
    return lambda: source.get(key)


def _single_plan(index: TensorIndex, det: Detection, role: Role) -> tuple[Component, ComponentPlan]:
    """Every refusal of loading ``index``'s ``role`` part, before any data is read; its plan."""
    comps = [c for c in det.components if c.role == role]
    if det.kind == "checkpoint" and comps:
        comp = comps[0]  # a checkpoint holds this part too: load just it
    elif det.kind == role and comps:
        comp = comps[0]
    else:
        raise _wrong_kind(index.path.name, det, role)
    _refuse_unloadable_format(index)
    # Plan before mapping the file: a family that cannot load is refused without touching data.
    return comp, _plan(index, comp)


def _load_single(path: str | os.PathLike[str], role: Role, options: LoadOptions | None) -> LoadedComponent:
    opts = options or LoadOptions()
    index, det = inspect_for_loading(path, opts)
    comp, plan = _single_plan(index, det, role)
    return _load_component(_Source(index), index, comp, plan, opts)


def check_loadable(path: str | os.PathLike[str], as_checkpoint: bool) -> None:
    """Raise what loading ``path`` (as a checkpoint, or as a lone diffusion model) would refuse,
    reading headers only: the wrong kind of file, a quantization that cannot be read, unknown or
    mismatched parts."""
    index, det = inspect_for_loading(path)
    if as_checkpoint:
        _checkpoint_plans(index, det)
    else:
        _single_plan(index, det, "diffusion_model")


def load_diffusion_model(path: str | os.PathLike[str], options: LoadOptions | None = None) -> LoadedComponent:
    return _load_single(path, "diffusion_model", options)


def load_vae(path: str | os.PathLike[str], options: LoadOptions | None = None) -> LoadedComponent:
    return _load_single(path, "vae", options)


def load_text_encoder(path: str | os.PathLike[str], options: LoadOptions | None = None) -> LoadedComponent:
    return _load_single(path, "text_encoder", options)
