"""Generation for one session, as the window uses it: the caches that make the second picture
fast (prompt conditioning, file hashes, preview maps) and the T5 tokenizer, found once on the
user's disk (their ComfyUI or Forge installs first, from the library's folders)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import torch

from core.detect.catalog import REGISTRY
from core.files.shards import expand_shards
from core.generate.events import GenerateProgress, GenerateResult
from core.generate.hashes import FileHashes
from core.generate.image_prompts import EncoderSearch
from core.generate.pictures import read_picture
from core.generate.request import ImageSettings
from core.generate.session_run import GenerateState, Output, generate
from core.preprocess.placed import let_go
from core.session.session import Session
from core.session.slots import SlotId
from core.text.cache import ConditioningCache
from core.text.embeddings import EmbeddingFolders
from core.text.t5_tokenizer import T5Tokenizer, T5TokenizerSearch, installs_from_origins


def needs_t5(family: str | None) -> bool:
    """Whether the family's prompt encoding takes T5 (its record's text encoders say so)."""
    fam = REGISTRY.get(family) if family else None
    return fam is not None and fam.diffusion is not None and fam.diffusion.needs_t5


class Generator:
    def __init__(
        self,
        session: Session,
        *,
        t5_tokenizer: Path | None = None,
        taesd_folders: tuple[Path, ...] = (),
        embedding_folders: tuple[Path, ...] = (),
    ) -> None:
        self.session = session
        # picture hashes come from the library's store: the sqlite cache, else one read kept there
        self.state = GenerateState(hashes=FileHashes(session.library.hashes))
        self.t5_path = t5_tokenizer  # Settings: an explicit tokenizer file or folder
        self.taesd_folders = taesd_folders  # besides the library's ComfyUI installs
        self.embedding_folders = embedding_folders  # after the library's embeddings folders

    def _search(self) -> T5TokenizerSearch:
        index = self.session.library.index
        origins = [r.origin for r in index.roots] if index is not None else []
        folders = [r.path for r in index.roots if r.kind_hint == "embeddings"] if index is not None else []
        # and the folders where the scan found embedding files (a plain folder the user added)
        folders += (
            [e.path.parent for e in index.entries() if e.kind == "embedding"] if index is not None else []
        )
        embeddings = EmbeddingFolders.of([*folders, *self.embedding_folders])
        if embeddings.folders != self.state.embeddings.folders:  # kept (with the files read) otherwise
            self.state.embeddings = embeddings
        comfy, forge = installs_from_origins(origins)
        known = [(e.path, e.family) for e in index.entries() if e.kind == "image_encoder"] if index else []
        self.state.workflows.encoder_search = EncoderSearch(tuple(known), comfy)  # image prompts' encoders
        found = (root / "models" / "vae_approx" for root in comfy)
        self.state.taesd_folders = tuple(dict.fromkeys((*self.taesd_folders, *found)))
        return T5TokenizerSearch(explicit=self.t5_path, comfyui_installs=comfy, forge_installs=forge)

    def generate(
        self,
        settings: ImageSettings,
        output: Output,
        progress: Callable[[GenerateProgress], None],
        check: Callable[[], None],
        init: np.ndarray | None = None,
        dtype: torch.dtype | None = None,
    ) -> GenerateResult:
        if init is None and settings.init_image is not None:  # the window's img2img / inpainting
            init = read_picture(settings.init_image)
        loaded = self.session.loaded.get(SlotId.MAIN)
        search = self._search()  # also where TAESD decoders may be
        if loaded is not None and needs_t5(loaded.family) and self.state.t5_tokenizer is None:
            self.state.t5_tokenizer = T5Tokenizer.find(search)
        return generate(
            self.session, settings, output, state=self.state, progress=progress, check=check, init=init,
            dtype=dtype,
        )  # fmt: skip

    # -- the files kept mapped (the window's leases: core.files.leases) ---------------------------
    def mapped_files(self) -> set[Path]:
        """Every file the session and the generation caches keep memory-mapped: the loaded models,
        the LoRA stack's files, the kept ControlNets, upscale models and refiner (resolved paths)."""
        session, workflows = self.session, self.state.workflows
        paths = [m.path for m in session.loaded.values()]
        if session.loras.stack is not None:
            paths += [e.path for e in session.loras.stack.entries.values()]
        paths += [*self.state.upscalers, *workflows.controlnets.loaded, *workflows.preprocessors.loaded]
        paths += workflows.image_prompts.paths()
        if workflows.refiner is not None:
            paths.append(workflows.refiner.path)
        return {Path(p).resolve() for p in expand_shards(paths) if p is not None}  # every shard

    def unload_files(self, paths: Iterable[Path], reason: str) -> list[Path]:
        """Unload every model mapped from ``paths`` (slots, LoRAs, kept ControlNets, upscale models,
        refiner) without running it; the files unloaded, as they were loaded."""
        changed = {Path(p).resolve() for p in paths}
        session, workflows, placement = self.session, self.state.workflows, self.session.placement
        names: list[Path] = []
        for slot, loaded in list(session.loaded.items()):
            if loaded.path.resolve() in changed:
                names.append(loaded.path)
                self.state.predictions.pop(loaded.path, None)
                session.unload(slot, reason)
        stack = session.loras.stack
        for lora_id, entry in list(stack.entries.items()) if stack is not None else []:
            if entry.path.resolve() in changed:
                names.append(entry.path)
                session.loras.remove(lora_id)
        for net in workflows.controlnets.keep_only(set(workflows.controlnets.loaded) - changed):
            names.append(net.path)
            placement.release(net.module)
        for model in workflows.preprocessors.keep_only(set(workflows.preprocessors.paths()) - changed):
            names.append(model.path)
            let_go(placement, model)
        prompts = workflows.image_prompts
        kept = set(prompts.paths()) - changed
        names += [p for p in prompts.paths() if p not in kept]
        for module in prompts.keep_only(kept):
            placement.release(module)
        for path in [p for p in self.state.upscalers if Path(p).resolve() in changed]:
            names.append(Path(path))
            placement.release(self.state.upscalers.pop(path).module)
        refiner = workflows.refiner
        if refiner is not None and refiner.path.resolve() in changed:
            names.append(refiner.path)
            for obj in refiner.objects:
                placement.release(obj)
            workflows.refiner = None
        if names:  # prompts encoded by an unloaded text encoder are not kept
            self.state.conditioning = ConditioningCache(self.state.conditioning.capacity)
        return names
