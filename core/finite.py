"""Non-finite values caught where they appear: a NaN or Inf in a weight gives a black picture
(NaN pixels cast to 0) and nothing else says so. Three cheap checks, each on a small tensor that
is on the CPU already or is read once (never per step, so no extra device wait per step):

- after the text encoders: the prompt's conditioning (float32, CPU);
- after sampling: the final latent (one check per picture, on the device);
- after the VAE: the pixels (float32, CPU), before anything is saved.

Each names the component that made the values, so the artist knows which file is damaged.
"""

from __future__ import annotations

import torch

from core.errors import LoadoutError


class NonFiniteError(LoadoutError):
    """A model component produced NaN or Inf values: nothing is saved."""

    code = "nonfinite_values"


def require_finite(component: str, *tensors: torch.Tensor | None) -> None:
    """Raise :class:`NonFiniteError` naming ``component`` when any value of ``tensors`` is NaN or Inf."""
    for t in tensors:
        if t is None or not t.is_floating_point():
            continue
        if not bool(torch.isfinite(t).all()):
            kind = "NaN" if bool(torch.isnan(t).any()) else "infinite"
            raise NonFiniteError(
                f"the {component} produced {kind} values",
                why=f"one of its weights is probably {kind} (a damaged or badly converted file); "
                "the picture would be black",
                fix=f"Use another copy of the {component}'s file (check it for non-finite values)",
            )
