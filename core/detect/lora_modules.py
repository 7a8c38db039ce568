"""One adapter module from its tensor shapes: algorithm, rank, and the shape of the weight it patches.

Shapes follow the writers (kohya sd-scripts, LyCORIS, PEFT, diffusers):

- LoRA: down ``[r, in(, kh, kw)]``, up ``[out, r(, 1, 1)]``, optional Tucker ``mid [r, r, kh, kw]``.
- LoHa: ``hada_w1_a [out, r]``, ``hada_w1_b [r, in*kh*kw]``; with Tucker ``hada_t1 [r, r, kh, kw]``
  the factors turn around: ``hada_w1_a [r, out]``, ``hada_w1_b [r, in]``.
- LoKr: ``kron(w1, w2)``; ``w1 [a, c]`` (or ``w1_a [a, r] @ w1_b [r, c]``), ``w2 [b, d(, kh, kw)]``
  (or ``w2_a [b, r] @ w2_b [r, d*kh*kw]``; with ``lokr_t2``: ``w2_a [r, b]``, ``w2_b [r, d]``).
- GLoRA: ``a1 [in, r]``, ``a2 [r, in]``, ``b1 [out, r]``, ``b2 [r, in(, kh, kw)]``.
- OFT: ``oft_blocks [n, b, b]`` rotates the ``n*b`` outputs; BOFT: ``oft_blocks [m, n, b, b]``.
- Full: ``diff`` has the weight's shape, ``diff_b`` the bias's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from core.files.tensor_info import TensorInfo

#: Parts that make a module an adapter on their own (alpha, dora_scale, rescale... only qualify).
CORE_PARTS = frozenset(
    {
        "down",
        "diff",
        "diff_b",
        "set_weight",
        "hada_w1_a",
        "lokr_w1",
        "lokr_w1_a",
        "a1",
        "oft_blocks",
        "oft_diag",
        "w_norm",
        "b_norm",
    }
)


@dataclass(frozen=True)
class Shape:
    """What the shapes of one module say."""

    algorithm: str | None  # None: the parts do not make a complete adapter
    rank: int | None
    out_features: int | None
    in_features: int | None  # for a conv without Tucker factors, LoHa/LoKr give in*kh*kw
    conv: bool | None  # None when the shapes cannot tell
    kernel: tuple[int, int] | None
    problem: str = ""  # why ``algorithm`` is None


@dataclass(frozen=True)
class LoraModule:
    """One module of an adapter file, ready to be mapped onto a model key.

    ``path`` is the dotted module path inside its component with every file prefix removed
    (``input_blocks.4.1.transformer_blocks.0.attn2.to_k``, ``text_model.encoder.layers.0.mlp.fc1``);
    for kohya-style names it is rebuilt from the underscored name, so compare ``flat_path`` with
    the model key's ``key.replace(".", "_")`` when an exact match matters.
    """

    name: str  # the module name as the file spells it (its keys minus the factor suffix)
    path: str
    role: str  # "diffusion_model" | "text_encoder"
    encoder: int | None  # text encoder index as the file numbers it (kohya te1/te2/te3, text_encoder_2)
    encoder_id: str | None  # "clip-l" | "clip-g" | "clip-h" | "t5-xxl" | "umt5-xxl" | ... when known
    format: str  # naming scheme of this module ("kohya", "diffusers", "peft", ...)
    algorithm: str  # "lora" | "locon" | "loha" | "lokr" | "glora" | "oft" | "boft" | "diff" | "norm" | "ia3"
    rank: int | None
    has_alpha: bool
    has_dora_scale: bool
    out_features: int | None
    in_features: int | None
    conv: bool | None
    kernel: tuple[int, int] | None
    keys: tuple[tuple[str, str], ...]  # (canonical part, key in the file), sorted by part

    def key(self, part: str) -> str | None:
        """The file key of one canonical part ("down", "up", "alpha", "hada_w1_a", ...)."""
        for name, key in self.keys:
            if name == part:
                return key
        return None

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.keys)

    @property
    def flat_path(self) -> str:
        return self.path.replace(".", "_")

    @property
    def algorithms(self) -> frozenset[str]:
        """The main algorithm plus "dora" (magnitude vector) and "diff" (full bias/weight diffs)."""
        found = {self.algorithm}
        if self.has_dora_scale:
            found.add("dora")
        if self.algorithm != "diff" and {"diff", "diff_b", "set_weight"} & set(self.parts):
            found.add("diff")
        return frozenset(found)


def _dim(info: TensorInfo | None, axis: int) -> int | None:
    if info is None or len(info.shape) <= axis:
        return None
    return info.shape[axis]


def _kernel(info: TensorInfo | None) -> tuple[int, int] | None:
    if info is None or info.ndim != 4:
        return None
    return info.shape[2], info.shape[3]


def _lora(p: Mapping[str, TensorInfo]) -> Shape:
    down, up, mid = p.get("down"), p.get("up"), p.get("mid")
    if down is None or up is None:
        return Shape(None, None, None, None, None, None, "has only one of its two LoRA factors")
    kernel = _kernel(mid) or _kernel(down)
    conv = down.ndim == 4 or mid is not None
    is_locon = mid is not None or (kernel is not None and kernel != (1, 1))
    return Shape("locon" if is_locon else "lora", _dim(down, 0), _dim(up, 0), _dim(down, 1), conv, kernel)


def _loha(p: Mapping[str, TensorInfo]) -> Shape:
    if not {"hada_w1_a", "hada_w1_b", "hada_w2_a", "hada_w2_b"} <= p.keys():
        return Shape(None, None, None, None, None, None, "lacks some of hada_w1_a/_b, hada_w2_a/_b")
    w1a, w1b, t1 = p["hada_w1_a"], p["hada_w1_b"], p.get("hada_t1")
    if t1 is not None:
        return Shape("loha", _dim(w1b, 0), _dim(w1a, 1), _dim(w1b, 1), True, _kernel(t1))
    return Shape("loha", _dim(w1b, 0), _dim(w1a, 0), _dim(w1b, 1), None, None)


def _lokr_factor(
    full: TensorInfo | None, a: TensorInfo | None, b: TensorInfo | None, tucker: bool
) -> tuple[int | None, int | None, int | None]:
    """(rows, cols, rank) of one Kronecker factor."""
    if full is not None:
        return _dim(full, 0), _dim(full, 1), None
    if a is None or b is None:
        return None, None, None
    if tucker:
        return _dim(a, 1), _dim(b, 1), _dim(b, 0)
    return _dim(a, 0), _dim(b, 1), _dim(b, 0)


def _lokr(p: Mapping[str, TensorInfo]) -> Shape:
    has_w1 = "lokr_w1" in p or {"lokr_w1_a", "lokr_w1_b"} <= p.keys()
    has_w2 = "lokr_w2" in p or {"lokr_w2_a", "lokr_w2_b"} <= p.keys()
    if not (has_w1 and has_w2):
        return Shape(None, None, None, None, None, None, "lacks one of its two Kronecker factors")
    t2 = p.get("lokr_t2")
    a, c, r1 = _lokr_factor(p.get("lokr_w1"), p.get("lokr_w1_a"), p.get("lokr_w1_b"), False)
    b, d, r2 = _lokr_factor(p.get("lokr_w2"), p.get("lokr_w2_a"), p.get("lokr_w2_b"), t2 is not None)
    w2 = p.get("lokr_w2")
    kernel = _kernel(t2) or _kernel(w2)
    conv: bool | None = True if kernel is not None else (False if w2 is not None else None)
    out = a * b if a is not None and b is not None else None
    inp = c * d if c is not None and d is not None else None
    return Shape("lokr", r2 if r2 is not None else r1, out, inp, conv, kernel)


def _glora(p: Mapping[str, TensorInfo]) -> Shape:
    if not {"a1", "a2", "b1", "b2"} <= p.keys():
        return Shape(None, None, None, None, None, None, "lacks some of a1, a2, b1, b2")
    b2 = p["b2"]
    return Shape("glora", _dim(p["a2"], 0), _dim(p["b1"], 0), _dim(b2, 1), b2.ndim == 4, _kernel(b2))


def _oft(p: Mapping[str, TensorInfo]) -> Shape:
    blocks = p.get("oft_blocks") or p.get("oft_diag")
    assert blocks is not None
    if blocks.ndim == 4:  # BOFT: [m, n, b, b]
        return Shape("boft", None, blocks.shape[1] * blocks.shape[2], None, None, None)
    if blocks.ndim == 3:
        return Shape("oft", None, blocks.shape[0] * blocks.shape[1], None, None, None)
    if blocks.ndim == 2:  # a single block
        return Shape("oft", None, blocks.shape[0], None, None, None)
    return Shape(None, None, None, None, None, None, f"has oft_blocks of shape {list(blocks.shape)}")


def _diff(p: Mapping[str, TensorInfo]) -> Shape:
    full = p.get("diff") or p.get("set_weight")
    if full is None:
        bias = p.get("diff_b")
        return Shape("diff", None, _dim(bias, 0), None, None, None)
    return Shape("diff", None, _dim(full, 0), _dim(full, 1), full.ndim == 4, _kernel(full))


def _norm(p: Mapping[str, TensorInfo]) -> Shape:
    w = p.get("w_norm") or p.get("b_norm")
    return Shape("norm", None, _dim(w, 0), None, False, None)


def _ia3(p: Mapping[str, TensorInfo]) -> Shape:
    w = p["ia3_weight"]
    return Shape("ia3", None, math.prod(w.shape) if w.shape else None, None, None, None)


def describe(parts: Mapping[str, TensorInfo]) -> Shape | None:
    """The module's shape facts, or None when its parts make no adapter at all."""
    keys = parts.keys()
    if "down" in keys or "up" in keys:
        return _lora(parts)
    if any(k.startswith("hada_") for k in keys):
        return _loha(parts)
    if any(k.startswith("lokr_") for k in keys):
        return _lokr(parts)
    if keys & {"a1", "a2", "b1", "b2"}:
        return _glora(parts)
    if keys & {"oft_blocks", "oft_diag"}:
        return _oft(parts)
    if keys & {"diff", "diff_b", "set_weight"}:
        return _diff(parts)
    if keys & {"w_norm", "b_norm"}:
        return _norm(parts)
    if "ia3_weight" in keys and "on_input" in keys:
        return _ia3(parts)
    return None
