"""Reading and replacing one tensor of a module by its state-dict key."""

from __future__ import annotations

from torch import Tensor, nn


def _owner(module: nn.Module, key: str) -> tuple[nn.Module, str]:
    owner_name, _, leaf = key.rpartition(".")
    try:
        return (module.get_submodule(owner_name) if owner_name else module), leaf
    except AttributeError:
        raise KeyError(key) from None


def get_tensor(module: nn.Module, key: str) -> Tensor:
    owner, leaf = _owner(module, key)
    value: Tensor | None = owner._parameters.get(leaf)
    if value is None:
        value = owner._buffers.get(leaf)
    if value is None:
        raise KeyError(key)
    return value


def set_tensor(module: nn.Module, key: str, value: Tensor) -> None:
    owner, leaf = _owner(module, key)
    if leaf in owner._parameters:
        owner._parameters[leaf] = nn.Parameter(value, requires_grad=False)
    elif leaf in owner._buffers:
        owner._buffers[leaf] = value
    else:
        raise KeyError(key)
