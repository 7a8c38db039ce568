"""FaceID from the command line: ``--ip-adapter ip-adapter-faceid_sd15.safetensors:face.png`` with
InsightFace's files named (``--insightface``) or found in ComfyUI's ``models/insightface`` beside
``models/ipadapter``; the adapter placed by the manager (no image encoder for plain FaceID; CLIP
vision of the face crop for Plus v2), the PNG item written and read back (Plus v2's face weight
too), the same picture on a 48 MiB simulated card as with none; no face, missing files refused in
words before any picture is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import main
from app.demo import DemoLibrary, ensure_demo_library
from core.errors import LoadoutError
from core.generate.command import generate_files
from core.generate.image_prompts import ip_adapters_in
from core.generate.parameters import parse_parameters
from core.generate.png import read_png_parameters
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.generate.workflow_request import IpAdapterUse
from tests.core.faces.face_graphs import face_picture, write_buffalo
from tests.core.image_prompts.faceid_files import faceid_file_for
from tests.core.image_prompts.ip_files import INNER
from tests.core.image_prompts.vision_files import vision_reference
from tests.fixtures.st_files import write_tensors

Files = tuple[DemoLibrary, Path, Path, Path, Path]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    root = tmp_path_factory.mktemp("faceid_cli")
    demo = ensure_demo_library(root / "demo")
    models = root / "ComfyUI" / "models"
    plain = faceid_file_for(models / "ipadapter" / "ip-adapter-faceid_sd15.safetensors", INNER, seed=1)
    v2 = faceid_file_for(models / "ipadapter" / "ip-adapter-faceid-plusv2_sd15.safetensors", INNER, plus=True)
    tower = {k: v.half() for k, v in vision_reference(layers=1).state_dict().items()}
    write_tensors(models / "clip_vision" / "CLIP-ViT-H-14.safetensors", tower)
    buffalo = write_buffalo(models / "insightface" / "models" / "buffalo_l")
    Image.fromarray(face_picture()).save(root / "face.png")
    return demo, plain, v2, buffalo, root / "face.png"


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def _make(demo: DemoLibrary, out: Path, limit: int | None = None, **image: object) -> np.ndarray:
    settings = ImageSettings("a cat", "fog", width=64, height=64, sampling=Sampling(seed=3, steps=3), **image)  # type: ignore[arg-type]
    request = GenerateRequest(ModelFiles(checkpoint=demo.checkpoint), settings, output=out, vram_limit=limit)
    return _pixels(generate_files(request).images[0].path)


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    code = main(["generate", "--prompt", "a cat", "--negative", "fog", "--seed", "3", "--steps", "3",
                 "--size", "64x64", "--json", *args])  # fmt: skip
    stdout, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(stdout)


def test_faceid_from_the_command_line_placed_named_and_the_same_on_a_small_card(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo, plain, _, buffalo, face = files
    out = tmp_path / "faceid.png"
    report = _cli([str(demo.checkpoint), "--ip-adapter", f"{plain}:{face}:0.8", "--insightface", str(buffalo),
                   "--vram-limit", "48MiB", "-o", str(out)], capsys)  # fmt: skip
    roles = {e["role"] for e in report["events"]}
    assert "ip_adapter" in roles and "image_encoder" not in roles
    kept = {e["model"] for e in report["events"] if e["role"] == "face_model" and e["kind"] == "keep"}
    assert kept == {"det_10g face model", "w600k_r50 face model"}  # the manager counts them, in RAM
    (item,) = ip_adapters_in(parse_parameters(read_png_parameters(out)).extra)
    assert item.model.startswith("ip-adapter-faceid_sd15 [") and item.encoder == ""
    assert (item.image, item.weight, item.face_weight) == ("face.png", 0.8, None)
    whole = _make(
        demo, tmp_path / "whole.png", ip_adapters=(IpAdapterUse(plain, face, 0.8),), insightface=buffalo
    )
    assert np.array_equal(_pixels(out), whole)
    assert not np.array_equal(whole, _make(demo, tmp_path / "plain.png"))


def test_faceid_plus_v2_finds_insightface_beside_the_adapter_and_reads_back_its_face_weight(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo, _, v2, _, face = files
    out = tmp_path / "v2.png"
    report = _cli(
        [str(demo.checkpoint), "--ip-adapter", f"{v2}:{face}:0.7:face-weight=1.5", "-o", str(out)], capsys
    )
    assert {"ip_adapter", "image_encoder"} <= {e["role"] for e in report["events"]}
    (item,) = ip_adapters_in(parse_parameters(read_png_parameters(out)).extra)
    assert item.face_weight == 1.5 and item.encoder.startswith("CLIP-ViT-H-14 [")
    same = _make(demo, tmp_path / "same.png", ip_adapters=(IpAdapterUse(v2, face, 0.7, face_weight=1.5),))
    assert np.array_equal(_pixels(out), same)
    default = _make(demo, tmp_path / "default.png", ip_adapters=(IpAdapterUse(v2, face, 0.7),))
    assert not np.array_equal(same, default)  # the face weight acts (default: twice the weight)


def test_no_face_and_missing_files_refused_in_words(files: Files, tmp_path: Path) -> None:
    demo, plain, _, _, _ = files
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(tmp_path / "black.png")
    with pytest.raises(LoadoutError) as err:
        _make(demo, tmp_path / "x.png", ip_adapters=(IpAdapterUse(plain, tmp_path / "black.png"),))
    assert err.value.code == "no_face" and "black.png" in err.value.what
    alone = tmp_path / "alone" / "ipadapter" / plain.name
    alone.parent.mkdir(parents=True)
    shutil.copy(plain, alone)
    with pytest.raises(LoadoutError) as err:
        _make(demo, tmp_path / "x.png", ip_adapters=(IpAdapterUse(alone, tmp_path / "black.png"),))
    assert err.value.code == "missing_file" and "models/insightface/models/buffalo_l" in str(err.value)
    assert not (tmp_path / "x.png").exists()
