"""The workflows every family has, run on one of the decoder-LLM families' small real files (real
encoder widths, few layers; the builders of each family's ``test_generate_*_cli.py``): img2img,
inpainting with a noise mask, the hires fix with a latent upscale and with an upscale model, as
jobs of the queue (one worker: the models load once), and an X/Y grid from the command line.

What each checks: the picture's size (the hires fix doubles it; FLUX.2's latent is 1/16 of the
picture, not 1/8), that the starting picture changes what is made, and the noise mask at its two
ends and between: a mask that repaints everything is txt2img (a flow model's first sigma is 1, so
the starting latent weighs nothing), one that repaints nothing gives the starting picture through
the VAE (the sampler keeps its latent), half a mask neither; and that the grid's cells are the
queue's, with one model load. (The half mask's kept half is not compared pixel by pixel: the VAE's
attention spreads a latent change over the whole picture.)"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from app.cli import main
from core.archs.catalog import codec_for
from core.generate.hashes import FileHashes
from core.generate.hires_settings import HiresFix
from core.generate.png import read_png_parameters, to_uint8_rgb
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.loading.loader import load_vae
from core.queue.job import with_hashes
from core.queue.runner import LocalPool, QueueRunner
from core.queue.store import JobStore
from core.queue.worker import Worker
from tests.fixtures.controlnets import hint_picture
from tests.fixtures.upscale_models import write_compact

SIZE, STEPS = 64, 2


@dataclass(frozen=True)
class Made:
    pictures: dict[str, np.ndarray]
    parameters: dict[str, str]


def _mask(path: Path, white: str) -> Path:
    """White (repaint) in the right ``half``, ``all`` white or ``none``."""
    m = np.zeros((SIZE, SIZE), np.uint8)
    if white != "none":
        m[:, SIZE // 2 if white == "half" else 0 :] = 255
    Image.fromarray(m).save(path)
    return path


def vae_round_trip(ae: Path, family: str, picture: Path) -> np.ndarray:
    """The picture encoded (posterior mean) and decoded by the family's codec, by hand."""
    codec, vae = codec_for(family), load_vae(ae).module
    rgb = np.asarray(Image.open(picture).convert("RGB"))
    pixels = torch.from_numpy(np.array(rgb)).permute(2, 0, 1)[None].float() / 127.5 - 1.0
    with torch.inference_mode():
        out = codec.decode(vae, codec.encode(vae, pixels))
    return to_uint8_rgb(out[0].float()).astype(np.int32)


def run_workflows(files: tuple[Path, Path, Path], folder: Path) -> Made:
    """Every workflow of the module notes as one queue of jobs on one local worker."""
    model, text, ae = files
    init = hint_picture(folder / "init.png", SIZE, SIZE, seed=5)
    half, none = _mask(folder / "half.png", "half"), _mask(folder / "none.png", "none")
    everything = _mask(folder / "all.png", "all")
    upscaler = write_compact(folder / "2x_compact.safetensors", scale=2)
    models = ModelFiles(diffusion_model=model, text_encoders=(text,), vae=ae)
    plain = Sampling(seed=3, steps=STEPS, cfg=1.0)
    cases: dict[str, dict[str, object]] = {
        "txt2img": {},
        "img2img": {"init_image": init, "sampling": Sampling(seed=3, steps=STEPS, cfg=1.0, denoise=0.6)},
        "inpaint": {"init_image": init, "mask_image": half},
        "inpaint_nothing": {"init_image": init, "mask_image": none},
        "inpaint_all": {"init_image": init, "mask_image": everything},
        "hires_latent": {"hires": HiresFix(2.0, 0.5, STEPS)},
        "hires_model": {"hires": HiresFix(2.0, 0.5, STEPS, model=upscaler)},
    }
    hashes, store = FileHashes(), JobStore()
    outputs = {name: folder / f"{name}.png" for name in cases}
    for name, image in cases.items():
        image.setdefault("sampling", plain)
        settings = ImageSettings("a red fox in the snow", width=SIZE, height=SIZE, **image)  # type: ignore[arg-type]
        store.add([with_hashes(GenerateRequest(models, settings, output=outputs[name]), hashes)])
    report = QueueRunner(store, LocalPool(Worker("local", hashes=hashes))).run()
    failed = {j.job.request.output.name: j.error for j in store.jobs() if j.state != "done"}
    assert not failed, failed
    assert len(report.finished) == len(cases)
    pictures, parameters = {}, {}
    for name, path in outputs.items():
        with Image.open(path) as im:
            pictures[name] = np.asarray(im.convert("RGB")).astype(np.int32)
        parameters[name] = read_png_parameters(path)
    return Made(pictures, parameters)


def check_workflows(made: Made, start: np.ndarray) -> None:
    """``start``: the starting picture through the VAE (:func:`vae_round_trip`)."""
    p = made.pictures
    for name in ("txt2img", "img2img", "inpaint", "inpaint_nothing", "inpaint_all"):
        assert p[name].shape == (SIZE, SIZE, 3), (name, p[name].shape)
    for name in ("hires_latent", "hires_model"):
        assert p[name].shape == (2 * SIZE, 2 * SIZE, 3), (name, p[name].shape)
        assert "Hires upscale: 2" in made.parameters[name], made.parameters[name]
    assert "Hires upscaler: 2x_compact" in made.parameters["hires_model"]
    assert "Denoising strength: 0.6" in made.parameters["img2img"]
    assert p["txt2img"].std() > 5
    assert not np.array_equal(p["img2img"], p["txt2img"])  # the starting picture was used
    assert np.abs(p["inpaint_all"] - p["txt2img"]).max() <= 1  # everything repainted: txt2img
    assert np.abs(p["inpaint_nothing"] - start).max() <= 1  # nothing repainted: the start, through the VAE
    for other in ("inpaint_all", "inpaint_nothing"):
        assert np.abs(p["inpaint"] - p[other]).mean() > 2, other  # half repainted: neither


def check_grid(files: tuple[Path, Path, Path], folder: Path, capsys: object) -> None:
    """``loadout generate ... --x seed:1,2 --y steps:1,2``: four cells and the grid, models loaded once."""
    model, text, ae = files
    out = folder / "grid"
    code = main([
        "generate", "--diffusion-model", str(model), "--text-encoder", str(text), "--vae", str(ae),
        "--prompt", "a red fox", "--cfg", "1", "--size", f"{SIZE}x{SIZE}", "--x", "seed:1,2",
        "--y", "steps:1,2", "-o", str(out), "--json",
    ])  # fmt: skip
    stdout, err = capsys.readouterr()  # type: ignore[attr-defined]
    assert code == 0, err
    report = json.loads(stdout)
    # the three files loaded once for the four cells (a worker counts each file it loads)
    assert report["workers"] == {"local": {"jobs": 4, "model_loads": 3}}, report["workers"]
    assert report["grids"] == [str(out / "grid.png")]
    cells = {(c["x"], c["y"]): c["image"] for c in report["cells"]}
    assert sorted(cells) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    pictures = {k: np.asarray(Image.open(v).convert("RGB")) for k, v in cells.items()}
    assert all(pic.shape == (SIZE, SIZE, 3) for pic in pictures.values())
    assert not np.array_equal(pictures[(1, 2)], pictures[(2, 2)])  # each cell its own seed
