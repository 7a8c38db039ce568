"""One worker: a :class:`~core.session.session.Session` on one device that runs jobs one at a
time, keeping its models and LoRA stack between them (what affinity scheduling counts on).

The in-process executor and every Ray actor run this same class, so a cell's picture is the same
bits whichever runs it. A job's files are found by hash in the worker's own folders. The LoRA
stack is baked at the request's strengths; a cell's strengths are set live (side paths) and put
back afterwards, so a picture depends on its job alone, never on the jobs before it. Pictures are
made in a scratch folder and handed back as PNG bytes: the client writes them, once, atomically.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from core.detect.catalog import generation_defaults
from core.generate.command import generator_for, load_models, lora_matches, read_picture, refuse_partial
from core.generate.events import GenerateProgress
from core.generate.generator import Generator
from core.generate.hashes import FileHashes
from core.generate.request import GenerateRequest, ModelFiles, with_family_defaults
from core.generate.session_run import Output
from core.loading.assign import interrupt_check
from core.memory.devices import device_named
from core.patching.block_weights import BlockWeights
from core.queue.index import ModelIndex
from core.queue.job import FileRef, Job, Key
from core.session.placement import Placement, PlacementConfig
from core.session.session import Session
from core.session.slots import SlotId
from core.session.snapshots import SessionEvent


@dataclass(frozen=True)
class CellResult:
    pngs: tuple[bytes, ...]  # each picture's file, exactly as it is to be written
    worker: str
    seconds: float
    model_loads: int  # files this job loaded (0 when the worker already held them)


class Worker:
    def __init__(
        self,
        name: str,
        *,
        device: str = "cpu",
        vram_limit: int | None = None,
        roots: Iterable[Path] = (),
        interrupt: threading.Event | None = None,
        session: Session | None = None,
        hashes: FileHashes | None = None,
    ) -> None:
        """A worker with its own Session, or on ``session`` (the window's: its device and settings,
        its Stop); it then replaces the loaded models with each job's when they differ."""
        self.name = name
        if session is None:
            config = PlacementConfig(simulate_bytes=vram_limit or 0)
            placement = Placement(device_named(device), config, interrupt=interrupt, cpu_is_device=True)
            session = Session(placement, on_event=self._record)
        self.session = session
        self.events: deque[SessionEvent] = deque(maxlen=2000)  # its own session's, for a remote client
        self.index = ModelIndex(roots, hashes)  # shared with the PNGs' hashes: each file hashed once
        self.jobs = 0
        self.model_loads = 0
        self.held: Key = ((), ())
        self._models: ModelFiles | None = None
        self._loras: tuple[tuple[Path, float, float | None, BlockWeights | None], ...] = ()
        self._generator: Generator | None = None

    def _record(self, event: SessionEvent) -> None:
        self.events.append(event)

    def drain_events(self) -> list[SessionEvent]:
        """The session's events (loads, LoRAs, memory decisions, phases) since the last call."""
        out = []
        while self.events:
            out.append(self.events.popleft())
        return out

    def missing(self, files: Iterable[FileRef]) -> list[FileRef]:
        return self.index.missing(files)

    def stop(self) -> None:
        """Stop the running job within a tensor, a layer or a step (any thread)."""
        self.session.interrupt.set()

    def _prepare(self, request: GenerateRequest, key: Key) -> tuple[Generator, int]:
        check = interrupt_check(self.session.interrupt.is_set)
        loads = 0
        if self._generator is None or self._models != request.models:
            for slot in list(self.session.loaded):
                self.session.unload(slot)
            self._generator, self._models, self._loras, self.held = None, None, (), ((), ())
            family = load_models(self.session, request.models, check)
            loads = len(request.models.paths)
            self._models = request.models
            self._generator = generator_for(
                self.session, request.models, family, embeddings=request.embeddings
            )
            self._generator.state.hashes = self.index.hashes
        self._generator.state.prediction = request.prediction
        wanted = tuple((a.path, a.model, a.clip, a.block_weights) for a in request.loras)
        if wanted != self._loras:
            stack = self.session.loras.stack
            for lora_id in list(stack.entries if stack is not None else ()):
                self.session.loras.remove(lora_id)
            self._loras = ()
            for path, model, clip, weights in wanted:
                self.session.loras.add(path, model, clip, force=request.force, block_weights=weights)
            self._loras = wanted
        self.held = key
        return self._generator, loads

    def run(self, job: Job, progress: Callable[[GenerateProgress], None] | None = None) -> CellResult:
        """Make the job's pictures; raises :class:`~core.queue.index.MissingFiles` when a file is
        not on this machine, and InterruptedByUser after :meth:`stop` (a stop that came after the
        last job's last check stops this one before it starts: it is never lost at a boundary)."""
        self.session.placement.manager.check()
        t0 = time.perf_counter()
        request = job.with_paths(self.index.resolve(job.files, self.name))
        generator, loads = self._prepare(request, job.key())
        self.model_loads += loads
        if request.strict:  # every job: a strict one may follow a lenient one on the same stack
            refuse_partial(lora_matches(self.session))
        loras = self.session.loras
        stack = loras.stack
        first = next(iter(stack.entries.values())) if stack is not None and stack.entries else None
        original = (first.model_strength, first.clip_strength) if first is not None else None
        defaults = generation_defaults(self.session.model(SlotId.MAIN).family)
        image = with_family_defaults(request.image, defaults, request.family_defaults)
        init = read_picture(image.init_image) if image.init_image is not None else None
        report = progress or (lambda p: None)
        with tempfile.TemporaryDirectory(prefix="loadout-cell-") as scratch:
            try:
                if first is not None and job.lora_strengths is not None:
                    loras.set_strength(first.id, *job.lora_strengths, bake=False)
                out = Output(Path(scratch) / job.request.output.name)
                result = generator.generate(
                    image,
                    out,
                    report,
                    self.session.placement.manager.check,
                    init,
                    dtype=request.dtype,
                )
            finally:
                if first is not None and original is not None and job.lora_strengths is not None:
                    loras.set_strength(first.id, *original, bake=True)
            pngs = tuple(image.path.read_bytes() for image in result.images)
        self.jobs += 1
        return CellResult(pngs, self.name, time.perf_counter() - t0, loads)
