"""FLUX.1 control LoRAs: Black Forest Labs' ``flux1-canny-dev-lora`` / ``flux1-depth-dev-lora`` and
LoRAs trained like them (diffusers' ``train_control_lora_flux``), from their keys and shapes.

Such a LoRA turns FLUX.1 [dev] into FLUX.1 Canny/Depth [dev]: its ``img_in`` (diffusers:
``x_embedder``) factor takes 128 inputs where the model's layer has 64 (the packed noisy latent,
then the packed latent of the control picture), so the layer is widened with zeros before the
LoRA's change is added (ComfyUI's ``reshape_weight`` patch, diffusers'
``_maybe_expand_transformer_param_shape_or_error_``). BFL's files also replace the attention's
q/k norm scales (``..._norm.scale``: ComfyUI's ``set_weight`` patch) and add a bias to some layers
(``lora_B.bias``: ComfyUI's ``diff_b``); diffusers' files name the norms ``attn.norm_q.weight``.

Whether a control LoRA was trained on canny edges or on depth maps the weights do not say: the
file name may, and the control picture decides what it follows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Protocol

from core.detect.lora_keys import KeyPart

#: the family a control LoRA is made for (and the only one it goes on)
BASE: Final = "flux-dev"
#: img_in's inputs on FLUX.1 [dev] and on its Canny/Depth models (16 latent channels x 2x2, doubled)
PLAIN_INPUTS: Final = 64
CONTROL_INPUTS: Final = 128


def takes_control_picture(in_channels: int, latent_channels: int, control_lora: bool) -> bool:
    """Whether a model's input has a control picture's latent beside the noisy one: its own
    (FLUX.1 Canny/Depth: twice the latent's channels) or a control LoRA's widening."""
    return control_lora or in_channels == 2 * latent_channels


#: the module of the layer a control LoRA widens, as files name it
_INPUT_LAYERS: Final = ("img_in", "x_embedder")
_PREFIXES: Final = ("", "diffusion_model.", "model.diffusion_model.", "transformer.")
_DIFFUSERS_NORMS: Final = (".attn.norm_q.weight", ".attn.norm_k.weight", ".attn.norm_added_q.weight",
                           ".attn.norm_added_k.weight")  # fmt: skip

NOTE: Final = (
    "a FLUX.1 control LoRA (Canny or Depth: the weights do not say which): it widens FLUX.1 [dev]'s "
    "img_in to take a control picture"
)


def _input_factor(keys: Iterable[str]) -> str | None:
    names = {f"{p}{layer}.lora_A.weight" for p in _PREFIXES for layer in _INPUT_LAYERS}
    return next((k for k in keys if k in names), None)


def control_overrides(keys: Sequence[str], in_features: Mapping[str, int]) -> dict[str, KeyPart]:
    """For a FLUX.1 control LoRA (its input layer's factor wider than FLUX.1's 64 inputs), the keys
    read otherwise than in a plain LoRA: norm scales as ``set_weight``, ``lora_B.bias`` as the
    bias's ``diff_b``. Empty for any other file. ``in_features``: key -> its dim 1."""
    factor = _input_factor(keys)
    if factor is None or in_features.get(factor, 0) <= PLAIN_INPUTS:
        return {}
    out: dict[str, KeyPart] = {}
    for key in keys:
        if key.endswith("_norm.scale"):  # BFL: double_blocks.0.img_attn.norm.key_norm.scale
            out[key] = KeyPart(key[: -len(".scale")], "set_weight", "lora_A")
        elif key.endswith(_DIFFUSERS_NORMS):
            out[key] = KeyPart(key[: -len(".weight")], "set_weight", "lora_A")
        elif key.endswith(".lora_B.bias"):
            out[key] = KeyPart(key[: -len(".lora_B.bias")], "diff_b", "lora_A")
    return out


class Module(Protocol):
    @property
    def path(self) -> str: ...

    @property
    def in_features(self) -> int | None: ...


def control_inputs(modules: Iterable[Module]) -> int | None:
    """The input width a FLUX.1 control LoRA widens img_in to (128), None for any other LoRA."""
    for m in modules:
        if m.path in _INPUT_LAYERS and (m.in_features or 0) > PLAIN_INPUTS:
            return m.in_features
    return None


def widens(path: str, adapter: tuple[int | None, int | None], weight: Sequence[int]) -> bool:
    """Whether a module (``adapter``: its out, in features) widens the weight of ``path``: a control
    LoRA's input layer, as many outputs and more inputs than FLUX.1's [out, 64] weight."""
    out, inputs = adapter
    return (
        path in _INPUT_LAYERS and len(weight) == 2 and out == weight[0] and weight[1] == PLAIN_INPUTS
        and (inputs or 0) > PLAIN_INPUTS
    )  # fmt: skip
