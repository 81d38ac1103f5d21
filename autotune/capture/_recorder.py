"""The traffic recorder: a writer process fed through a bounded queue, so recording never slows or
fails a request.

The proxy calls :meth:`TrafficRecorder.submit` (a non-blocking put of the raw body; a full queue or
a dead writer drops the record and counts it). The writer process parses, anonymizes (unless
``raw``), appends to the hourly file and keeps the folder under ``max_disk_bytes`` by removing
the oldest traffic files; a full disk, an unwritable folder or a bad record is logged and counted,
and recording carries on with the next record. Tokenizing and hashing run in that process, away
from the proxy's event loop and its GIL.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import queue
import signal
import threading
from dataclasses import dataclass
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

from autotune.capture._records import BadRecord, CapturedRequest, hour_file_name, to_record

__all__ = ["RecorderConfig", "TrafficRecorder"]

log = logging.getLogger(__name__)

_STOP = None
_ANON_MAX_NODES = 2_000_000  # sibling-table entries kept before the anonymizer starts afresh


@dataclass(frozen=True)
class RecorderConfig:
    out_dir: Path
    raw: bool = False
    model: Path | None = None  # tokenizer for anonymization (required unless raw)
    salt_env: str = "AUTOTUNE_ANON_SALT"  # the writer reads the salt from its environment
    max_disk_bytes: int | None = None
    queue_size: int = 10_000


class _DiskBound:
    """Traffic files of the folder with their sizes; the oldest go first past the bound."""

    def __init__(self, folder: Path, limit: int | None) -> None:
        self.folder = folder
        self.limit = limit
        self.sizes = (
            {p.name: p.stat().st_size for p in folder.glob("traffic-*.jsonl")} if folder.is_dir() else {}
        )

    def total(self) -> int:
        return sum(self.sizes.values())

    def room_for(self, current: str, size: int) -> bool:
        """Remove the oldest files until ``size`` more bytes fit; False if only ``current`` is left."""
        if self.limit is None:
            return True
        while self.total() + size > self.limit:
            older = sorted(name for name in self.sizes if name != current)
            if not older:
                return False
            oldest = older[0]
            with contextlib.suppress(FileNotFoundError):
                (self.folder / oldest).unlink()
            del self.sizes[oldest]
            log.info("capture: removed %s to stay under %d bytes", oldest, self.limit)
        return True


class _Writer:
    def __init__(self, config: RecorderConfig) -> None:
        self.config = config
        self.anonymizer: Any = None
        if not config.raw:
            from autotune.workload import Anonymizer, load_tokenizer

            assert config.model is not None
            salt = os.environ.get(config.salt_env, "").encode()
            self.anonymizer = Anonymizer(load_tokenizer(config.model), salt)
        self.disk = _DiskBound(config.out_dir, config.max_disk_bytes)
        self.errors = 0

    def _anonymized(self, record: dict[str, Any]) -> dict[str, Any]:
        from autotune.workload import ChatMessage, WorkloadRequest, request_record

        messages = record.get("messages")
        req = WorkloadRequest(
            index=0,
            line=0,
            id="",
            max_tokens=record["max_tokens"],
            prompt=record.get("prompt"),
            messages=None
            if messages is None
            else tuple(ChatMessage(m["role"], m["content"]) for m in messages),
            timestamp=record["timestamp"],
        )
        if self.anonymizer.nodes > _ANON_MAX_NODES:
            self.anonymizer.forget()
        out = request_record(self.anonymizer.request(req))
        del out["id"]
        return out

    def write(self, req: CapturedRequest) -> None:
        try:
            record = to_record(req)
            if self.anonymizer is not None:
                record = self._anonymized(record)
        except BadRecord as exc:
            log.warning("capture: request at %.3f not recorded: %s", req.arrival, exc)
            return
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode()
        name = hour_file_name(req.arrival)
        if not self.disk.room_for(name, len(line)):
            self._error(f"{name} alone reaches the disk bound; records dropped until the next hour")
            return
        try:
            self.config.out_dir.mkdir(parents=True, exist_ok=True)
            with open(self.config.out_dir / name, "ab") as fh:
                fh.write(line)
            self.disk.sizes[name] = self.disk.sizes.get(name, 0) + len(line)
        except OSError as exc:
            self._error(f"cannot write {self.config.out_dir / name}: {exc}")

    def _error(self, message: str) -> None:
        self.errors += 1
        if self.errors <= 10 or self.errors % 1000 == 0:  # do not flood the log on a full disk
            log.error("capture: %s (%d recording errors so far)", message, self.errors)


def _writer_main(config: RecorderConfig, inbox: Queue[CapturedRequest | None]) -> None:
    """The writer process: records until the stop sentinel, then exits at once (every file is
    closed after each record; the tokenizer library's threads would otherwise hold the exit)."""
    # Ctrl-C or a SIGTERM to the process group must not cut the queue short: the proxy stops the
    # writer with the sentinel, and the writer ends by itself if the proxy dies without sending it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        _write_until_stopped(config, inbox, os.getppid())
    finally:
        logging.shutdown()
        os._exit(0)


def _next(inbox: Queue[CapturedRequest | None], parent: int) -> CapturedRequest | None:
    """The next request, or the sentinel; also the sentinel once the proxy process is gone."""
    while True:
        try:
            return inbox.get(timeout=2.0)
        except queue.Empty:
            if os.getppid() != parent:
                return _STOP


def _write_until_stopped(config: RecorderConfig, inbox: Queue[CapturedRequest | None], parent: int) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s capture-writer %(levelname)s %(message)s")
    try:
        writer = _Writer(config)
    except Exception:
        log.exception("capture: the writer cannot start; requests are forwarded but not recorded")
        while _next(inbox, parent) is not _STOP:  # drain so the proxy's queue never fills
            pass
        return
    while (item := _next(inbox, parent)) is not _STOP:
        try:
            writer.write(item)
        except Exception:  # a bug in one record must not end recording
            log.exception("capture: unexpected error recording one request")


class TrafficRecorder:
    """Owns the writer process. ``submit`` never blocks and never raises."""

    def __init__(self, config: RecorderConfig) -> None:
        if not config.raw and config.model is None:
            raise ValueError("an anonymizing recorder needs the model's tokenizer (model=...)")
        ctx = multiprocessing.get_context("spawn")
        self._queue: Queue[CapturedRequest | None] = ctx.Queue(maxsize=config.queue_size)
        self._process = ctx.Process(
            target=_writer_main, args=(config, self._queue), daemon=True, name="capture-writer"
        )
        # started with SIGINT and SIGTERM ignored (kept across exec): a signal to the process group in
        # the seconds the new interpreter spends importing, before _writer_main ignores them itself,
        # would kill it with the queue unwritten (a CI run lost both records of a test that way)
        main = threading.current_thread() is threading.main_thread()  # signal.signal's rule
        saved = [(sig, signal.signal(sig, signal.SIG_IGN)) for sig in (signal.SIGINT, signal.SIGTERM) if main]
        try:
            self._process.start()
        finally:
            for sig, handler in saved:
                signal.signal(sig, handler)
        self.dropped = 0

    def submit(self, req: CapturedRequest) -> None:
        try:
            self._queue.put_nowait(req)
        except (queue.Full, ValueError, OSError):  # full, or closed
            self.dropped += 1

    def close(self, timeout: float = 90.0) -> None:
        """Write what is queued, then stop the writer (killed after ``timeout`` seconds: loading the
        tokenizer alone took 25 s on a busy 2-core machine)."""
        with contextlib.suppress(queue.Full, ValueError, OSError):
            self._queue.put(_STOP, timeout=timeout)
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        self._queue.close()
