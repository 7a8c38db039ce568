"""The queue file: nothing queued or running is lost; pause, cancel, reorder, retry, totals."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from core.errors import LoadoutError
from core.generate.request import GenerateRequest, ImageSettings, ModelFiles, Sampling
from core.patching.merge import LoraArg
from core.queue.job import FileRef, Job
from core.queue.store import JobStore


def _job(seed: int, tmp_path: Path) -> Job:
    request = GenerateRequest(
        ModelFiles(checkpoint=tmp_path / "m.safetensors", text_encoders=(tmp_path / "t.safetensors",)),
        ImageSettings("a fox", "blur", Sampling(seed=seed, cfg=None, sampler="dpmpp_2m"), 64, 96, batch=2),
        loras=(LoraArg(tmp_path / "l.safetensors", 0.7, None),),
        output=tmp_path / f"{seed}.png",
        dtype=torch.bfloat16,
        vram_limit=1 << 30,
    )
    return Job(request, (FileRef(tmp_path / "m.safetensors", "ab" * 32, 10),), (0.5, 0.25), "g", 1, 2, 0)


def test_a_job_round_trips_through_the_file_exactly(tmp_path: Path) -> None:
    job = _job(3, tmp_path)
    store = JobStore(tmp_path / "queue.sqlite")
    (jid,) = store.add([job])
    store.close()
    again = JobStore(tmp_path / "queue.sqlite").get(jid)
    assert again.job == job and again.state == "queued"


def test_strict_round_trips_and_a_queue_file_written_before_it_reads_as_not_strict(tmp_path: Path) -> None:
    import dataclasses
    import json
    import sqlite3

    job = _job(3, tmp_path)
    strict = dataclasses.replace(job, request=dataclasses.replace(job.request, strict=True))
    store = JobStore(tmp_path / "queue.sqlite")
    first, second = store.add([strict, job])
    store.close()
    old = job.to_json()
    del old["request"]["strict"]  # as a queue file from before the field existed holds it
    with sqlite3.connect(tmp_path / "queue.sqlite") as db:
        db.execute("UPDATE jobs SET job = ? WHERE id = ?", (json.dumps(old), second))
    again = JobStore(tmp_path / "queue.sqlite")
    assert again.get(first).job == strict and again.get(first).job.request.strict
    assert again.get(second).job == job and not again.get(second).job.request.strict


def test_a_running_job_is_queued_again_when_the_file_is_reopened(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "q.sqlite")
    a, b, c = store.add([_job(i, tmp_path) for i in range(3)])
    store.start(a, "local")
    store.finish(b, [tmp_path / "1.png"], "local", 1.5)
    del store  # a crash: nothing closed
    reopened = JobStore(tmp_path / "q.sqlite")
    assert reopened.recovered == 1
    assert [(j.id, j.state) for j in reopened.jobs()] == [(a, "queued"), (b, "done"), (c, "queued")]
    assert reopened.get(b).images == (tmp_path / "1.png",) and reopened.get(b).seconds == 1.5


def test_reorder_cancel_retry_pause_and_totals(tmp_path: Path) -> None:
    store = JobStore()
    a, b, c = store.add([_job(i, tmp_path) for i in range(3)])
    store.move(c, 0)
    assert [j.id for j in store.jobs()] == [c, a, b]
    assert store.cancel(a) == "queued" and store.get(a).state == "cancelled"
    store.retry(a)
    assert [j.id for j in store.jobs("queued")] == [c, b, a]  # retried at the end
    store.start(c, "w0")
    store.set_progress(c, 0.5)
    store.fail(b, "broken")
    assert store.totals().done == 1 and store.totals().fraction == pytest.approx((1 + 0.5) / 3)
    store.set_paused(True)
    assert store.paused
    store.set_paused(False)
    assert not store.paused
    with pytest.raises(LoadoutError, match="no job 99"):
        store.get(99)


def test_a_damaged_queue_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "q.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(LoadoutError, match="cannot open the queue file"):
        JobStore(bad)


def test_guidance_patches_round_trip_through_the_queue_file(tmp_path: Path) -> None:
    import dataclasses

    from core.guidance import parse_patch

    job = _job(4, tmp_path)
    patches = (parse_patch("pag:2.5"), parse_patch("slg:double_layers=3,4"), parse_patch("deep_shrink"))
    image = dataclasses.replace(job.request.image, guidance_patches=patches)
    patched = dataclasses.replace(job, request=dataclasses.replace(job.request, image=image))
    store = JobStore(tmp_path / "queue.sqlite")
    (jid,) = store.add([patched])
    store.close()
    assert JobStore(tmp_path / "queue.sqlite").get(jid).job.request.image.guidance_patches == patches
