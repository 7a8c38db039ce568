"""Where models live: ComfyUI and A1111 installs, extra_model_paths.yaml, plain folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import LoadoutError
from core.library.sources import (
    ModelRoot,
    a1111_roots,
    comfyui_roots,
    detect_install,
    installs_in,
    parse_extra_model_paths,
    roots_for,
)
from tests.core.library.conftest import make_a1111, make_comfyui


def _hints(roots: list[ModelRoot], base: Path) -> list[tuple[str, str | None]]:
    return [(r.path.relative_to(base).as_posix(), r.kind_hint) for r in roots]


def test_comfyui_default_layout_maps_old_folder_names(tmp_path: Path) -> None:
    install = make_comfyui(tmp_path)
    (install / "models" / "unet").mkdir()
    (install / "models" / "hypernetworks").mkdir()
    roots = comfyui_roots(install)
    assert _hints(roots, install / "models") == [
        ("checkpoints", "checkpoints"),
        ("unet", "diffusion_models"),
        ("loras", "loras"),
        ("vae", "vae"),
        ("clip", "text_encoders"),
        ("upscale_models", "upscale_models"),
        ("hypernetworks", None),
    ]  # only folders that exist; in ComfyUI's order
    assert {r.origin for r in roots} == {f"comfyui:{install}"}


def test_extra_model_paths_semantics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """base_path relative to the yaml (not the cwd), $VARS and ~ expanded, several paths per key,
    absolute paths kept, old names mapped, unknown keys hinted None, code/config folders skipped."""
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("MODELS_HOME", str(tmp_path / "store"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # the cwd must not matter: paths are relative to the yaml
    yaml_path = conf / "extra_model_paths.yaml"
    yaml_path.write_text(
        "a111:\n"
        "    base_path: ../webui/\n"
        "    is_default: true\n"
        "    checkpoints: models/Stable-diffusion\n"
        "    configs: models/Stable-diffusion\n"
        "    loras: |\n"
        "         models/Lora\n"
        "         models/LyCORIS\n"
        "\n"
        "    hypernetworks: models/hypernetworks\n"
        "    custom_nodes: extensions\n"
        "store:\n"
        "    base_path: $MODELS_HOME\n"
        "    clip: clip\n"
        "    unet: |\n"
        "        unet\n"
        f"        {tmp_path / 'elsewhere'}\n"
        "home:\n"
        "    base_path: ~/models\n"
        "    vae: vae\n"
        "no_base:\n"
        "    embeddings: emb\n"
        "empty_group:\n",
        encoding="utf-8",
    )
    roots = parse_extra_model_paths(yaml_path)
    assert _hints(roots, tmp_path) == [
        ("webui/models/Stable-diffusion", "checkpoints"),
        ("webui/models/Lora", "loras"),
        ("webui/models/LyCORIS", "loras"),
        ("webui/models/hypernetworks", None),
        ("store/clip", "text_encoders"),
        ("store/unet", "diffusion_models"),
        ("elsewhere", "diffusion_models"),
        ("home/models/vae", "vae"),
        ("conf/emb", "embeddings"),
    ]
    assert roots[0].origin == "extra_model_paths.yaml:a111"
    assert roots[4].origin == "extra_model_paths.yaml:store"
    assert all(r.path.is_absolute() for r in roots)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("group:\n  loras: [unclosed\n", "line 3"),
        ("group:\n\tloras: x\n", "line 2"),
        ("- just\n- a list\n", "top level should be named groups"),
        ("group: models/loras\n", "a group maps folder types to paths"),
        ("group:\n  loras: 42\n", "group.loras"),
        ("group:\n  base_path: [1, 2]\n  loras: x\n", "base_path"),
    ],
)
def test_bad_yaml_is_a_loadout_error_with_what_why_fix(tmp_path: Path, text: str, why: str) -> None:
    yaml_path = tmp_path / "extra_model_paths.yaml"
    yaml_path.write_text(text, encoding="utf-8")
    with pytest.raises(LoadoutError) as info:
        parse_extra_model_paths(yaml_path)
    err = info.value
    assert err.code == "bad_config"
    assert str(yaml_path) in err.message and why.lower() in err.message.lower()
    assert err.fix and "ComfyUI" in err.fix


def test_yaml_that_is_not_text_or_not_there(tmp_path: Path) -> None:
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(LoadoutError, match="not UTF-8"):
        parse_extra_model_paths(binary)
    with pytest.raises(LoadoutError) as info:
        parse_extra_model_paths(tmp_path / "missing.yaml")
    assert info.value.code == "config_unreadable"
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing configured yet\n")
    assert parse_extra_model_paths(empty) == []


def test_broken_yaml_in_an_install_keeps_the_default_folders(tmp_path: Path) -> None:
    install = make_comfyui(tmp_path)
    (install / "extra_model_paths.yaml").write_text("x: [\n")
    with pytest.raises(LoadoutError):
        comfyui_roots(install)
    problems: list[LoadoutError] = []
    roots = comfyui_roots(install, problems)
    assert [r.kind_hint for r in roots][:2] == ["checkpoints", "loras"]
    assert len(problems) == 1 and "extra_model_paths.yaml is not valid YAML" in problems[0].message


def test_yaml_pointing_at_the_install_itself_lists_each_folder_once(tmp_path: Path) -> None:
    install = make_comfyui(tmp_path)
    (install / "extra_model_paths.yaml").write_text(
        "comfyui:\n  base_path: .\n  loras: models/loras\n  checkpoints: ./models/checkpoints/\n"
    )
    roots = comfyui_roots(install)
    assert [r.path.name for r in roots].count("loras") == 1
    assert all(r.origin.startswith("comfyui:") for r in roots)  # the first one found wins


def test_a1111_layout(tmp_path: Path) -> None:
    install = make_a1111(tmp_path)
    (install / "models" / "ESRGAN").mkdir()
    (install / "models" / "ControlNet").mkdir()
    roots = a1111_roots(install)
    assert _hints(roots, install) == [
        ("models/Stable-diffusion", "checkpoints"),
        ("models/Lora", "loras"),
        ("models/LyCORIS", "loras"),
        ("embeddings", "embeddings"),
        ("models/ControlNet", "controlnet"),
        ("models/ESRGAN", "upscale_models"),
    ]
    assert roots[0].origin == f"a1111:{install}"


def test_detect_install(tmp_path: Path) -> None:
    assert detect_install(make_comfyui(tmp_path / "c")) == "comfyui"
    assert detect_install(make_a1111(tmp_path / "a")) == "a1111"
    desktop = tmp_path / "Documents" / "ComfyUI"  # ComfyUI Desktop: no comfy package beside models
    (desktop / "models" / "checkpoints").mkdir(parents=True)
    (desktop / "custom_nodes").mkdir()
    assert detect_install(desktop) == "comfyui"
    forge_models_only = tmp_path / "forge"
    (forge_models_only / "models" / "Stable-diffusion").mkdir(parents=True)
    assert detect_install(forge_models_only) == "a1111"
    plain = tmp_path / "plain"
    (plain / "checkpoints").mkdir(parents=True)
    assert detect_install(plain) is None
    assert detect_install(tmp_path / "missing") is None
    (tmp_path / "file").write_text("x")
    assert detect_install(tmp_path / "file") is None


def test_roots_for_installs_yaml_plain_and_symlinked_folders(tmp_path: Path) -> None:
    portable = tmp_path / "ComfyUI_windows_portable"
    comfy = make_comfyui(portable)
    a1111 = make_a1111(tmp_path)
    plain = tmp_path / "my models"
    plain.mkdir()
    link = tmp_path / "loras-link"
    link.symlink_to(comfy / "models" / "loras")  # the same folder by another name
    yaml_path = tmp_path / "shared.yaml"
    yaml_path.write_text("g:\n  loras: my models\n")
    problems: list[LoadoutError] = []
    roots = roots_for([portable, a1111, plain, link, yaml_path, tmp_path / "gone"], problems)
    origins = [r.origin for r in roots]
    assert origins.count(f"comfyui:{comfy}") == 5  # checkpoints, loras, vae, clip, upscale_models
    assert origins.count(f"a1111:{a1111}") == 4
    assert ModelRoot(plain, None, "folder") in roots
    assert not any(r.path == link for r in roots)  # same real folder as comfy's loras
    assert not any(r.origin == "shared.yaml:g" for r in roots)  # same real folder as ``plain``
    assert roots[-1] == ModelRoot(tmp_path / "gone", None, "folder")  # kept: the index reports it
    assert problems == []
    assert roots_for([plain], plain_origin="loadout") == [ModelRoot(plain, None, "loadout")]


def test_model_root_rejects_an_unknown_hint(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kind_hint"):
        ModelRoot(tmp_path, "Lora", "folder")


def test_installs_in_the_usual_places_under_home(tmp_path: Path) -> None:
    """Before a folder is added the window offers these: ComfyUI (a clone, the Windows portable
    folder, Desktop's base under Documents) and A1111-style installs; a plain folder of models is
    not an install, and nothing else under home is looked at."""
    (tmp_path / "ComfyUI_windows_portable" / "ComfyUI" / "comfy").mkdir(parents=True)
    (tmp_path / "ComfyUI_windows_portable" / "ComfyUI" / "folder_paths.py").touch()
    (tmp_path / "Documents" / "ComfyUI" / "models" / "checkpoints").mkdir(parents=True)
    (tmp_path / "Documents" / "ComfyUI" / "custom_nodes").mkdir()
    (tmp_path / "stable-diffusion-webui-forge" / "models" / "Stable-diffusion").mkdir(parents=True)
    (tmp_path / "ComfyUI" / "models" / "checkpoints").mkdir(parents=True)  # models only: a plain folder
    (tmp_path / "elsewhere" / "ComfyUI" / "comfy").mkdir(parents=True)
    assert installs_in(tmp_path) == [
        tmp_path / "ComfyUI_windows_portable",
        tmp_path / "Documents" / "ComfyUI",
        tmp_path / "stable-diffusion-webui-forge",
    ]
    assert installs_in(tmp_path / "missing") == []
