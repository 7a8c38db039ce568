"""Guidance patches by name, read from and written as text.

* asked for: ``name`` or ``name:arg=value,arg=value`` (a bare first value sets the first
  parameter: ``pag:3.0``; a list parameter takes the values after it, ``slg:double_layers=7,8,9``);
* written (the PNG parameters): ``pag(scale=3), freeu_v2(b1=1.3,b2=1.4,s1=0.9,s2=0.2)``, every
  parameter with its value, read back by :func:`read_patches`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import Field
from types import MappingProxyType
from typing import Any

from core.errors import LoadoutError
from core.guidance.base import Choice, GuidancePatch, Layers, limits_of, parameters
from core.guidance.cfg_level import Apg, CfgNorm, CfgZeroStar, EpsilonScaling, RescaleCfg
from core.guidance.perturbed import Pag, Slg
from core.guidance.sag import Sag
from core.guidance.unet_level import DeepShrink, FreeU, FreeUV2
from core.values import BadValueError, NumberRange

_ALL: tuple[type[Any], ...] = (
    Pag, Sag, FreeU, FreeUV2, RescaleCfg, CfgZeroStar, Apg, EpsilonScaling, Slg, DeepShrink, CfgNorm,
)  # fmt: skip
#: every patch by its name
PATCHES: Mapping[str, type[Any]] = MappingProxyType({p.name: p for p in _ALL})


def _bad(what: str, why: str, fix: str) -> LoadoutError:
    return LoadoutError(what, why=why, fix=fix, code="bad_argument")


def _value(f: Field[Any], text: str, patch: str) -> Any:
    limits = limits_of(f)
    text = text.strip()
    what = f"{patch}'s {f.name} cannot be {text!r}"
    if isinstance(limits, NumberRange):
        try:
            return limits.parse(text)
        except BadValueError as exc:
            raise _bad(what, exc.why or exc.what, "Give a number in the range") from None
    if isinstance(limits, Layers):
        if not re.fullmatch(r"\d{1,3}(?:[ ,;/]+\d{1,3})*", text) and text:
            raise _bad(what, "it is a list of block numbers", "Give numbers such as 7,8,9")
        return tuple(int(n) for n in re.findall(r"\d+", text))
    if f.type in (bool, "bool"):
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise _bad(what, "it is true or false", "Give true or false")
        return text.lower() in ("true", "1", "yes")
    assert isinstance(limits, Choice)
    if text not in limits.options:
        raise _bad(what, f"it is one of {', '.join(limits.options)}", "Give one of those")
    return text


def _record(name: str) -> type[Any]:
    cls = PATCHES.get(name.strip().lower())
    if cls is None:
        raise _bad(
            f"there is no guidance patch named {name.strip()!r}",
            "the guidance patches are " + ", ".join(PATCHES),
            "Give one of those names",
        )
    return cls


def default_patches(names: Sequence[str]) -> tuple[GuidancePatch, ...]:
    """The patches ``names`` at their default parameters (a family's record's)."""
    return tuple(_record(name)() for name in names)


def patch_from(name: str, args: list[str]) -> GuidancePatch:
    """The patch ``name`` with ``args`` (``key=value`` items; a bare first item sets the first
    parameter, bare items after a list parameter extend it); the rest keep their defaults."""
    cls = _record(name)
    params = {f.name: f for f in parameters(cls)}
    given: dict[str, list[str]] = {}
    last: str | None = None
    for i, item in enumerate(a for a in args if a.strip()):
        if "=" in item:
            key, text = (s.strip() for s in item.split("=", 1))
            if key not in params:
                raise _bad(
                    f"the guidance patch {cls.name} has no parameter {key!r}",
                    f"its parameters are {', '.join(params) or 'none'}",
                    "Give one of those",
                )
            given[key], last = [text], key
        elif last is not None and isinstance(limits_of(params[last]), Layers):
            given[last].append(item)
        elif i == 0 and params:
            last = next(iter(params))
            given[last] = [item]
        else:
            raise _bad(
                f"{item.strip()!r} is not a parameter of {cls.name}",
                "parameters are given as name=value",
                f"Give e.g. {describe(cls())}",
            )
    values = {k: _value(params[k], ",".join(v), cls.name) for k, v in given.items()}
    patch: GuidancePatch = cls(**values)
    return patch


def parse_patch(text: str) -> GuidancePatch:
    """``name`` or ``name:arg=value,...`` -> the patch."""
    name, _, rest = text.partition(":")
    return patch_from(name, rest.split(",") if rest else [])


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(n) for n in value)
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


def describe(patch: GuidancePatch) -> str:
    """``name(arg=value,...)`` with every parameter."""
    args = ",".join(f"{f.name}={_shown(getattr(patch, f.name))}" for f in parameters(patch))
    return f"{patch.name}({args})"


def describe_all(patches: tuple[GuidancePatch, ...]) -> str:
    return ", ".join(describe(p) for p in patches)


_DESCRIBED = re.compile(r"\s*([a-z0-9_]+)\(([^()]*)\)\s*(?:,|$)")


def read_patches(text: str) -> tuple[GuidancePatch, ...]:
    """What :func:`describe_all` wrote, back into patches."""
    found, at = [], 0
    text = text.strip()
    while at < len(text):
        m = _DESCRIBED.match(text, at)
        if m is None:
            raise _bad(
                f"{text[at : at + 40]!r} is not a guidance patch",
                "patches are written name(arg=value,...)",
                "Write them as Loadout does",
            )
        found.append(patch_from(m.group(1), m.group(2).split(",")))
        at = m.end()
    return tuple(found)
