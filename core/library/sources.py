"""Where model files live: the folders of ComfyUI and A1111 installs, read in place (never copied).

A :class:`ModelRoot` is one folder to list, with what the install says belongs there (its
``kind_hint``: ``"loras"`` for ComfyUI's ``models/loras``) and where the folder came from (its
``origin``: ``"comfyui:/home/me/ComfyUI"``, ``"a1111:..."``, ``"extra_model_paths.yaml:<group>"``).

ComfyUI's ``extra_model_paths.yaml`` is read as ComfyUI reads it (``utils/extra_config.py``):
top-level groups; an optional ``base_path`` (``~`` and ``$VARS`` expanded, relative to the yaml
file's folder); ``is_default`` (only changes ComfyUI's search order, so ignored here); every other
key is a folder type whose value is one path or several, one per line. Unlike ComfyUI, ``~`` and
``$VARS`` are expanded in those paths too, and a YAML list of paths is accepted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from core.errors import LoadoutError
from core.files.leases import read_input

#: The folder kinds a root can be hinted with (ComfyUI's folder names, new spellings).
FOLDER_KINDS = (
    "checkpoints",
    "loras",
    "vae",
    "text_encoders",
    "diffusion_models",
    "controlnet",
    "upscale_models",
    "embeddings",
    "clip_vision",
    "ipadapter",
    "style_models",
)
#: Older ComfyUI folder names that mean the same as a newer one.
COMFY_ALIASES = {"clip": "text_encoders", "unet": "diffusion_models", "t2i_adapter": "controlnet"}
#: Folder types in extra_model_paths.yaml that hold code or configs, not models: never listed.
NOT_MODEL_FOLDERS = frozenset({"custom_nodes", "configs"})

#: ComfyUI ``models/<name>`` folders, in listing order, with their hint.
COMFY_FOLDERS: tuple[tuple[str, str | None], ...] = (
    ("checkpoints", "checkpoints"),
    ("diffusion_models", "diffusion_models"),
    ("unet", "diffusion_models"),
    ("loras", "loras"),
    ("vae", "vae"),
    ("text_encoders", "text_encoders"),
    ("clip", "text_encoders"),
    ("clip_vision", "clip_vision"),
    ("ipadapter", "ipadapter"),
    ("controlnet", "controlnet"),
    ("t2i_adapter", "controlnet"),
    ("upscale_models", "upscale_models"),
    ("embeddings", "embeddings"),
    ("hypernetworks", None),
    ("style_models", "style_models"),
    ("gligen", None),
    ("photomaker", None),
    ("model_patches", None),
    ("vae_approx", None),
    ("latent_upscale_models", None),
)
#: A1111 / Forge folders (relative to the install), in listing order, with their hint.
A1111_FOLDERS: tuple[tuple[str, str | None], ...] = (
    ("models/Stable-diffusion", "checkpoints"),
    ("models/Lora", "loras"),
    ("models/LyCORIS", "loras"),
    ("models/VAE", "vae"),
    ("models/text_encoder", "text_encoders"),
    ("embeddings", "embeddings"),
    ("models/ControlNet", "controlnet"),
    ("extensions/sd-webui-controlnet/models", "controlnet"),
    ("models/ESRGAN", "upscale_models"),
    ("models/RealESRGAN", "upscale_models"),
    ("models/SwinIR", "upscale_models"),
    ("models/hypernetworks", None),
    ("models/VAE-approx", None),
)
EXTRA_PATHS_NAME = "extra_model_paths.yaml"
#: A config file over this size is refused (they are a few hundred bytes).
CONFIG_CAP = 1024 * 1024

Install = Literal["comfyui", "a1111"]


@dataclass(frozen=True)
class ModelRoot:
    """One folder to list. ``kind_hint`` None means "any kind of model"."""

    path: Path
    kind_hint: str | None
    origin: str

    def __post_init__(self) -> None:
        if self.kind_hint is not None and self.kind_hint not in FOLDER_KINDS:
            raise ValueError(f"kind_hint {self.kind_hint!r} is not one of {FOLDER_KINDS}")


def folder_kind(key: str) -> str | None:
    """The hint for a ComfyUI folder type (``clip`` -> ``text_encoders``); None when unknown."""
    key = COMFY_ALIASES.get(key, key)
    return key if key in FOLDER_KINDS else None


def dedupe_roots(roots: Iterable[ModelRoot]) -> list[ModelRoot]:
    """``roots`` without those that resolve to a folder already listed (the first one is kept)."""
    seen: set[str] = set()
    out: list[ModelRoot] = []
    for root in roots:
        real = os.path.normcase(os.path.realpath(root.path))
        if real not in seen:
            seen.add(real)
            out.append(root)
    return out


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def detect_install(path: Path) -> Install | None:
    """``"comfyui"``, ``"a1111"`` (or Forge), or None for a plain folder."""
    path = Path(path).expanduser()
    if not _is_dir(path):
        return None
    if _is_dir(path / "comfy") and _is_file(path / "folder_paths.py"):
        return "comfyui"
    if _is_file(path / "webui.py") and _is_dir(path / "modules"):
        return "a1111"
    if _is_dir(path / "models" / "Stable-diffusion"):
        return "a1111"
    # ComfyUI Desktop's base folder has models/ and custom_nodes/ but not the comfy package.
    if _is_dir(path / "models" / "checkpoints") and (
        _is_dir(path / "custom_nodes") or _is_file(path / EXTRA_PATHS_NAME)
    ):
        return "comfyui"
    return None


def _present(base: Path, folders: Sequence[tuple[str, str | None]], origin: str) -> list[ModelRoot]:
    return [ModelRoot(base / rel, kind, origin) for rel, kind in folders if _is_dir(base / rel)]


def comfyui_roots(install_dir: Path, problems: list[LoadoutError] | None = None) -> list[ModelRoot]:
    """The ``models/*`` folders of a ComfyUI install that exist, then its extra_model_paths.yaml.

    A broken yaml raises, unless ``problems`` is given: then the error is appended to it and the
    default folders are still returned.
    """
    install = Path(install_dir).expanduser().absolute()
    roots = _present(install / "models", COMFY_FOLDERS, f"comfyui:{install}")
    yaml_path = install / EXTRA_PATHS_NAME
    if _is_file(yaml_path):
        try:
            roots += parse_extra_model_paths(yaml_path)
        except LoadoutError as exc:
            if problems is None:
                raise
            problems.append(exc)
    return dedupe_roots(roots)


def a1111_roots(install_dir: Path) -> list[ModelRoot]:
    """The model folders of an AUTOMATIC1111 (or Forge) install that exist."""
    install = Path(install_dir).expanduser().absolute()
    return dedupe_roots(_present(install, A1111_FOLDERS, f"a1111:{install}"))


def _config_error(path: Path, what: str, why: str, code: str = "bad_config") -> LoadoutError:
    return LoadoutError(
        f"{path} {what}",
        why=why,
        fix="Fix the file, or remove it (ComfyUI cannot use it as it is either)",
        code=code,
    )


def _read_yaml(path: Path) -> Any:
    try:
        size = path.stat().st_size
        if size > CONFIG_CAP:
            raise _config_error(path, "is too large", f"it is {size:,} bytes, over {CONFIG_CAP:,}")
        text = read_input(path).decode("utf-8-sig")
    except OSError as exc:
        raise LoadoutError(
            f"{path} cannot be read",
            why=exc.strerror or str(exc),
            fix="Check the file's permissions",
            code="config_unreadable",
        ) from None
    except UnicodeDecodeError as exc:
        raise _config_error(path, "is not UTF-8 text", f"byte {exc.start} is invalid") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise _config_error(path, "is not valid YAML", f"{where}{problem}"[:300]) from None
    except RecursionError:
        raise _config_error(path, "is not valid YAML", "it is nested too deeply") from None


def _expand(text: str) -> str:
    return os.path.expandvars(os.path.expanduser(text.strip()))


def _lines(path: Path, group: str, key: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        items: list[str] = value
    elif isinstance(value, str):
        items = value.split("\n")
    else:
        raise _config_error(
            path,
            f"has a bad value for {group}.{key}",
            f"it is a {type(value).__name__}; a folder path (or several, one per line) is expected",
        )
    return [s.strip() for s in items if s.strip()]


def _group_roots(path: Path, group: str, conf: dict[Any, Any]) -> list[ModelRoot]:
    yaml_dir = path.absolute().parent
    conf = dict(conf)
    base: Path | None = None
    raw_base = conf.pop("base_path", None)
    conf.pop("is_default", None)
    if raw_base is not None:
        if not isinstance(raw_base, str):
            raise _config_error(path, f"has a bad base_path in group {group!r}", "it is not a text path")
        expanded = _expand(raw_base)
        base = (yaml_dir / expanded) if expanded else None
    origin = f"{path.name}:{group}"
    roots: list[ModelRoot] = []
    for key, value in conf.items():
        key = str(key)
        if key in NOT_MODEL_FOLDERS:
            continue
        for line in _lines(path, group, key, value):
            expanded = _expand(line)
            full = (base or yaml_dir) / expanded  # an absolute ``expanded`` replaces the base
            roots.append(ModelRoot(Path(os.path.normpath(full)), folder_kind(key), origin))
    return roots


def parse_extra_model_paths(yaml_path: Path) -> list[ModelRoot]:
    """The folders an ``extra_model_paths.yaml`` names, in file order, missing ones included.

    Raises a :class:`LoadoutError` (what, why, fix) for a file that is not valid YAML or not
    shaped like ComfyUI's.
    """
    path = Path(yaml_path).expanduser()
    data = _read_yaml(path)
    if data is None:
        return []
    if not isinstance(data, dict):
        raise _config_error(
            path,
            "is not shaped like extra_model_paths.yaml",
            "the top level should be named groups of folders",
        )
    roots: list[ModelRoot] = []
    for group, conf in data.items():
        if conf is None:
            continue
        if not isinstance(conf, dict):
            raise _config_error(
                path,
                f"has a bad group {group!r}",
                f"it is a {type(conf).__name__}; a group maps folder types to paths",
            )
        roots += _group_roots(path, str(group), conf)
    return dedupe_roots(roots)


def _portable(path: Path) -> Path | None:
    """The ComfyUI install inside a Windows portable folder (``ComfyUI_windows_portable/ComfyUI``)."""
    inner = path / "ComfyUI"
    return inner if detect_install(inner) == "comfyui" else None


#: Where installs are usually put, relative to the home folder: ComfyUI (a clone, the Windows
#: portable folder, ComfyUI Desktop's base folder under Documents), A1111, Forge and reForge.
INSTALL_PLACES = (
    "ComfyUI",
    "ComfyUI_windows_portable",
    "Documents/ComfyUI",
    "stable-diffusion-webui",
    "stable-diffusion-webui-forge",
    "stable-diffusion-webui-reForge",
)


def installs_in(home: Path) -> list[Path]:
    """The ComfyUI and A1111-style installs in the usual places under ``home`` (a few ``stat``
    calls; nothing is walked), to offer before the artist has added a folder."""
    found = []
    for rel in INSTALL_PLACES:
        path = Path(home) / rel
        if detect_install(path) is not None or _portable(path) is not None:
            found.append(path)
    return found


def roots_for(
    paths: Iterable[Path | str],
    problems: list[LoadoutError] | None = None,
    *,
    plain_origin: str = "folder",
) -> list[ModelRoot]:
    """Roots for folders a user chose: an install's folders, a yaml's folders, or the folder itself.

    A plain folder (or a missing one, which the index then reports) is one root of any kind with
    origin ``plain_origin`` (the app passes ``"loadout"`` for its own folder). Roots that resolve
    to the same folder are listed once. Errors in yaml files raise unless ``problems`` is given.
    """
    roots: list[ModelRoot] = []
    for raw in paths:
        path = Path(raw).expanduser().absolute()
        if path.suffix.lower() in (".yaml", ".yml") and _is_file(path):
            try:
                roots += parse_extra_model_paths(path)
            except LoadoutError as exc:
                if problems is None:
                    raise
                problems.append(exc)
            continue
        install = detect_install(path)
        inner = _portable(path) if install is None else None
        if install == "comfyui" or inner is not None:
            roots += comfyui_roots(inner or path, problems)
        elif install == "a1111":
            roots += a1111_roots(path)
        else:
            roots.append(ModelRoot(path, None, plain_origin))
    return dedupe_roots(roots)
