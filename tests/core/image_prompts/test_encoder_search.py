"""One image encoder kind for both image prompts: one ``--image-encoder`` (``ImageSettings``), one
search (the library, each ComfyUI install's ``models/clip_vision``, beside the file) that finds a
CLIP tower for an IP-Adapter and SigLIP for FLUX Redux among the same files, one cache."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

from app.commands.image_prompt_args import add_image_prompt_arguments, image_prompt_settings
from core.generate.image_prompts import EncoderSearch, ImagePromptCache
from core.generate.workflow_request import IpAdapterUse, ReduxUse
from tests.core.image_prompts.vision_files import vision_reference
from tests.fixtures.image_prompt_files import hf_siglip, save
from tests.fixtures.st_files import write_tensors

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def towers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A ComfyUI install whose models/clip_vision holds a CLIP ViT-H and a SigLIP tower."""
    comfy = tmp_path_factory.mktemp("search") / "ComfyUI"
    vision = comfy / "models" / "clip_vision"
    vision.mkdir(parents=True)
    clip = {k: v.half() for k, v in vision_reference(layers=1).state_dict().items()}
    clip_file = write_tensors(vision / "CLIP-ViT-H-14.safetensors", clip)
    siglip_file = save(hf_siglip(layers=1), vision / "sigclip_vision_patch14_384.safetensors", torch.float16)
    (vision / "notes.safetensors").write_text("not a model")  # unreadable files are passed over
    return comfy, clip_file, siglip_file


def test_one_search_finds_each_image_prompts_encoder(towers: tuple[Path, Path, Path], tmp_path: Path) -> None:
    comfy, clip_file, siglip_file = towers
    beside = comfy / "models" / "ipadapter" / "ip-adapter_sd15.safetensors"  # its sibling clip_vision
    assert EncoderSearch().find("clip-vit-h", beside) == clip_file
    assert EncoderSearch().find("siglip-so400m", comfy / "models" / "style_models" / "r.sft") == siglip_file
    elsewhere = tmp_path / "loose" / "flux1-redux-dev.safetensors"  # not beside: the install's folder
    assert EncoderSearch().find("siglip-so400m", elsewhere) is None
    assert EncoderSearch(installs=(comfy,)).find("siglip-so400m", elsewhere) == siglip_file
    assert EncoderSearch(installs=(comfy,)).find("clip-vit-bigg", elsewhere) is None
    known = ((siglip_file, "siglip-so400m"), (tmp_path / "gone.safetensors", "clip-vit-h"))
    assert EncoderSearch(known=known).find("siglip-so400m", elsewhere) == siglip_file  # the library's
    assert EncoderSearch(known=known).find("clip-vit-h", elsewhere) is None  # a file no longer there

    err = EncoderSearch().missing(elsewhere, "clip-vit-h", "an IP-Adapter reads with CLIP", "e.g. x")
    assert err.code == "missing_image_encoder" and "CLIP ViT-H/14" in err.what
    assert "clip_vision" in (err.fix or "")


def test_one_image_encoder_flag_for_ip_adapter_and_redux(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_image_prompt_arguments(parser)
    args = parser.parse_args(
        ["--ip-adapter", "ip.safetensors:cat.png:0.8@0-0.5", "--redux", "redux.safetensors:dog.png:1.5",
         "--image-encoder", "tower.safetensors"]
    )  # fmt: skip
    got = image_prompt_settings(args)
    assert got["image_encoder"] == Path("tower.safetensors")
    assert got["ip_adapters"] == (IpAdapterUse(Path("ip.safetensors"), Path("cat.png"), 0.8, 0.0, 0.5),)
    assert got["redux"] == (ReduxUse(Path("redux.safetensors"), Path("dog.png"), 1.5),)


def test_one_cache_loads_an_encoder_once_and_releases_what_is_not_used(
    towers: tuple[Path, Path, Path],
) -> None:
    _, clip_file, siglip_file = towers
    cache = ImagePromptCache()
    clip, siglip = cache.encoder(clip_file, None), cache.encoder(siglip_file, None)
    assert cache.encoder(clip_file, None) is clip
    assert (clip.family, siglip.family) == ("clip-vit-h", "siglip-so400m")
    assert cache.keep_only({clip_file.resolve()}) == [siglip.module]
    assert cache.paths() == [clip_file.resolve()]
