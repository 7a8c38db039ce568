"""The queue file is never a single point of failure: damaged rows are set aside and named while
the rest stays usable; one owner per file (a second program shares it and never re-queues the
owner's running job); a lock held by another process is waited for, and what still fails is a
QueueFileError, never a raw sqlite3 error or a job stuck "running"."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core.queue.queue_file import QueueFileError
from core.queue.store import JobStore
from tests.core.queue.test_store import _job

ROOT = Path(__file__).resolve().parents[3]


def _rows(path: Path) -> dict[int, str]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT id, job FROM jobs").fetchall())


def _damage(path: Path, job_id: int, **columns: object) -> None:
    with sqlite3.connect(path) as db:
        for column, value in columns.items():
            db.execute(f"UPDATE jobs SET {column}=? WHERE id=?", (value, job_id))


def test_damaged_rows_are_set_aside_and_named_and_the_rest_is_usable(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite"
    store = JobStore(path)
    ids = store.add([_job(i, tmp_path) for i in range(5)])
    store.close()
    good = json.loads(_rows(path)[ids[3]])
    steps0 = json.loads(json.dumps(good))
    steps0["request"]["image"]["sampling"]["steps"] = 0
    _damage(path, ids[0], job="{not json")
    _damage(path, ids[1], state="exploded")
    _damage(path, ids[2], job=json.dumps(steps0))
    _damage(path, ids[3], images="7")

    again = JobStore(path)
    assert [q.id for q in again.jobs()] == [ids[4]]
    named = " | ".join(again.quarantined)
    assert all(f"job {i}:" in named for i in ids[:4]), named
    assert "exploded" in named and "steps" in named
    again.add([_job(9, tmp_path)])  # usable: add, run, finish
    assert len(again.jobs("queued")) == 2
    again.close()
    with sqlite3.connect(path) as db:  # moved out, kept for whoever wants to look
        assert sorted(r[0] for r in db.execute("SELECT id FROM quarantine")) == sorted(ids[:4])
    assert JobStore(path).quarantined == []


def test_fuzzed_rows_never_raise_and_each_row_is_a_job_or_named(tmp_path: Path) -> None:
    rng = random.Random(35)
    path = tmp_path / "queue.sqlite"
    store = JobStore(path)
    ids = store.add([_job(i, tmp_path) for i in range(40)])
    store.close()
    texts = _rows(path)
    junk: list[object] = [None, 0, -1, 1e308, "", "x" * 300, [], {}, [1, 2], {"a": 1}, True, 2**70]
    for job_id in ids[:30]:
        data = json.loads(texts[job_id])
        node = data
        trail = []
        while isinstance(node, dict) and node and rng.random() < 0.8:
            key = rng.choice(sorted(node))
            trail.append(key)
            if not isinstance(node[key], dict):
                break
            node = node[key]
        if trail:
            parent = data
            for key in trail[:-1]:
                parent = parent[key]
            if rng.random() < 0.2:
                del parent[trail[-1]]
            else:
                parent[trail[-1]] = rng.choice(junk)
        _damage(path, job_id, job=json.dumps(data))
    again = JobStore(path)
    listed = {q.id for q in again.jobs()}
    named = {int(n.split(":")[0].removeprefix("job ")) for n in again.quarantined}
    assert listed | named == set(ids) and not listed & named
    assert set(ids[30:]) <= listed


HOLD = textwrap.dedent(
    """
    import sqlite3, sys, time
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("BEGIN EXCLUSIVE")
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    db.execute("COMMIT")
    """
)


def _hold(path: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_lock_held_by_another_process_is_waited_for_then_said(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite"
    store = JobStore(path, busy_seconds=3.0)
    (a,) = store.add([_job(1, tmp_path)])
    proc = _hold(path, 0.5)  # shorter than the wait: the change goes through
    store.add([_job(2, tmp_path)])
    proc.wait()
    assert len(store.jobs()) == 2
    store.busy_seconds = 0.3
    proc = _hold(path, 3.0)  # longer: a message saying what to do, and nothing changed
    try:
        with pytest.raises(QueueFileError, match="Another program holds the queue file"):
            store.cancel(a)
    finally:
        proc.wait()
    assert store.get(a).state == "queued"


def test_a_full_disk_is_a_message_and_the_job_is_not_stuck_running(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite"
    store = JobStore(path)
    (a,) = store.add([_job(1, tmp_path)])
    assert store.claim(a, "local")
    pictures = store.get(a).job.outputs()
    for p in pictures:  # the client wrote the pictures, then the disk filled up
        p.write_bytes(b"png")
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count={pages}")
    with pytest.raises(QueueFileError, match="could not be used") as caught:
        store.add([_job(n, tmp_path) for n in range(50)])
    assert "full" in caught.value.message
    store.close()
    again = JobStore(path)  # the next start: the job whose pictures are on disk is done, not re-run
    assert again.get(a).state == "done" and again.recovered == 0


OPEN = textwrap.dedent(
    """
    import sys, time
    from core.queue.store import JobStore
    store = JobStore(sys.argv[1])
    print(store.owner, store.owner_pid, flush=True)
    sys.stdin.readline()
    """
)


def test_one_owner_per_file_and_a_second_program_never_requeues_the_running_job(tmp_path: Path) -> None:
    path = tmp_path / "queue.sqlite"
    store = JobStore(path)
    a, b = store.add([_job(1, tmp_path), _job(2, tmp_path)])
    assert store.owner and store.claim(a, "local")
    other = subprocess.Popen(
        [sys.executable, "-c", OPEN, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": ""}, cwd=ROOT,
    )  # fmt: skip
    assert other.stdout is not None and other.stdin is not None
    try:
        owner, pid = other.stdout.readline().split()
        assert owner == "False" and int(pid) > 0
        assert store.get(a).state == "running"  # the second program did not queue it again
    finally:
        other.stdin.write("\n")
        other.stdin.flush()
        other.wait()
    second = JobStore(path)  # in this process, a second store: not the owner either
    assert not second.owner
    assert second.claim(b, "other") and not store.claim(b, "local")  # one job, one taker
    assert second.recover() == 0 and store.get(a).state == "running"
    store.close()
    second.close()
    third = JobStore(path)  # the owner went: the next store owns it and recovers
    assert third.owner and third.recovered == 2
