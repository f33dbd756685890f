"""Page-cache residency and prewarming of model weights (Linux).

Residency is read with mincore(2) over a read-only mapping of each file (the pages need not be mapped by this
process). Prewarming asks the kernel to read ahead with posix_fadvise(WILLNEED) a window at a time and waits for
the pages to arrive with mincore, in parallel over fixed-size chunks of all files, skipping chunks that are
already resident: the kernel does the reading (deep queues, no copy into Python), the re-run of a warm set
reads nothing. Pure Python (ctypes), no Ansible import: shared by the pagecache modules and the benchmark.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

PAGE = mmap.PAGESIZE
CHUNK = 256 * 1024 * 1024  # unit of work handed to a reader
WINDOW = 8 * 1024 * 1024  # one readahead request
AHEAD = 8  # windows requested ahead of the one being waited for (64 MiB in flight per reader)
_MASK = bytes((b & 1) for b in range(256))  # mincore: bit 0 = resident, other bits reserved

_libc = ctypes.CDLL("libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def weight_files(root: str, patterns: tuple[str, ...] = (".safetensors",)) -> list[str]:
    """The weight files under root, symlinks followed (Hugging Face snapshots are links into blobs/)."""
    found = []
    for dirpath, _dirs, files in os.walk(root, followlinks=True):
        for name in files:
            if name.endswith(patterns):
                found.append(os.path.realpath(os.path.join(dirpath, name)))
    return sorted(set(found))


class _Mapping:
    """A read-only shared mapping of a whole file, for mincore."""

    def __init__(self, path: str) -> None:
        self.size = os.path.getsize(path)
        self.addr = None
        if self.size == 0:
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = _libc.mmap(None, self.size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        finally:
            os.close(fd)
        if addr in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap failed for {path}")
        self.addr = addr

    def resident_pages(self, offset: int = 0, length: int | None = None) -> tuple[int, int]:
        """(resident, total) pages of [offset, offset+length) — offset must be page-aligned."""
        if self.addr is None:
            return 0, 0
        length = self.size - offset if length is None else min(length, self.size - offset)
        pages = (length + PAGE - 1) // PAGE
        vec = ctypes.create_string_buffer(pages)
        if _libc.mincore(self.addr + offset, length, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        return vec.raw[:pages].translate(_MASK).count(1), pages

    def close(self) -> None:
        if self.addr is not None:
            _libc.munmap(self.addr, self.size)
            self.addr = None


def residency(paths: Iterable[str]) -> dict[str, int | float]:
    """Resident bytes and pages of a set of files (the page-cache share of the weights)."""
    resident = total = size = 0
    for path in paths:
        m = _Mapping(path)
        try:
            r, t = m.resident_pages()
        finally:
            m.close()
        resident, total, size = resident + r, total + t, size + m.size
    return {
        "bytes": size,
        "pages": total,
        "resident_pages": resident,
        "resident_bytes": min(resident * PAGE, size),
        "percent": 100.0 * resident / total if total else 100.0,
    }


@dataclass
class Progress:
    total: int  # bytes that had to be read
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, n: int) -> None:
        with self.lock:
            self.done += n

    def snapshot(self) -> dict[str, float]:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        left = max(self.total - self.done, 0)
        return {
            "done_bytes": self.done,
            "total_bytes": self.total,
            "elapsed_s": round(elapsed, 1),
            "gbps": round(rate / 1e9, 3),
            "eta_s": round(left / rate, 1) if rate > 0 else None,
        }


def _warm_chunk(path: str, m: _Mapping, offset: int, length: int, progress: Progress) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        end = offset + length
        windows = list(range(offset, end, WINDOW))
        for start in windows[:AHEAD]:
            os.posix_fadvise(fd, start, min(WINDOW, end - start), os.POSIX_FADV_WILLNEED)
        for i, start in enumerate(windows):
            if i + AHEAD < len(windows):
                ahead = windows[i + AHEAD]
                os.posix_fadvise(fd, ahead, min(WINDOW, end - ahead), os.POSIX_FADV_WILLNEED)
            size = min(WINDOW, end - start)
            resident, pages = m.resident_pages(start, size)
            sleep, stalled = 0.0002, 0
            while resident < pages:
                time.sleep(sleep)
                sleep = min(sleep * 2, 0.01)
                now, _ = m.resident_pages(start, size)
                stalled = stalled + 1 if now == resident else 0
                resident = now
                if stalled >= 20:
                    # No page arrived for ~200 ms: the kernel dropped the request (memory pressure): read it.
                    os.pread(fd, size, start)
                    break
            progress.add(size)
    finally:
        os.close(fd)


def prewarm(
    paths: list[str],
    workers: int,
    on_progress: Callable[[dict], None] | None = None,
    every_s: float = 1.0,
    before: dict | None = None,
) -> dict[str, object]:
    """Bring every page of the files into the page cache, `workers` chunks at a time. Chunks already resident
    are skipped, so a warm set costs one residency pass. Returns residency before/after and the read rate."""
    before = before or residency(paths)  # a caller that just measured passes its figure
    maps = {p: _Mapping(p) for p in paths}
    todo: queue.Queue[tuple[str, int, int]] = queue.Queue()
    need = 0
    try:
        # Largest files first keeps the tail short; chunks that are already resident are not queued.
        for path in sorted(paths, key=lambda p: -maps[p].size):
            m = maps[path]
            for offset in range(0, m.size, CHUNK):
                length = min(CHUNK, m.size - offset)
                resident, pages = m.resident_pages(offset, length)
                if resident < pages:
                    todo.put((path, offset, length))
                    need += length
        progress = Progress(total=need)
        errors: list[Exception] = []

        def reader() -> None:
            while True:
                try:
                    path, offset, length = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    _warm_chunk(path, maps[path], offset, length, progress)
                except Exception as exc:  # reported to the caller below
                    errors.append(exc)
                    return

        threads = [threading.Thread(target=reader, daemon=True) for _ in range(max(1, workers))]
        for t in threads:
            t.start()
        while alive := [t for t in threads if t.is_alive()]:
            alive[0].join(timeout=every_s)
            if on_progress and any(t.is_alive() for t in threads):
                on_progress(progress.snapshot())
        if errors:
            raise errors[0]
        final = progress.snapshot()
        if on_progress:  # the last report is the total, however quickly the readers finished
            on_progress(final)
    finally:
        for m in maps.values():
            m.close()
    after = residency(paths)
    return {
        "before": before,
        "after": after,
        "read_bytes": need,
        "seconds": final["elapsed_s"],
        "gbps": final["gbps"],
        "workers": workers,
    }


def default_workers(cpus: int | None = None, rotational: bool = False) -> int:
    """Readers to use: a few per CPU for SSD/NVMe (the kernel does the I/O; threads mostly wait), 2 for disks
    that seek. Measured: on 2 vCPUs readers saturate at 2-4 streams."""
    cpus = cpus or os.cpu_count() or 2
    return 2 if rotational else max(4, min(2 * cpus, 32))


def meminfo() -> dict[str, int]:
    values = {}
    with open("/proc/meminfo", encoding="ascii") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            values[key] = int(rest.split()[0]) * 1024
    return values


def ram_guard(total_bytes: int, headroom_bytes: int, mem: dict[str, int] | None = None) -> str | None:
    """Why the weights cannot stay resident, or None. MemAvailable already counts the weights' own cached
    pages, so the whole set must fit in MemAvailable minus the headroom the host needs."""
    mem = mem or meminfo()
    available = mem.get("MemAvailable", mem.get("MemFree", 0))
    if total_bytes <= available - headroom_bytes:
        return None
    gib = 1024**3
    return (
        f"the weights ({total_bytes / gib:.1f} GiB) cannot stay in the page cache: {available / gib:.1f} GiB "
        f"available (MemTotal {mem.get('MemTotal', 0) / gib:.1f} GiB) minus {headroom_bytes / gib:.1f} GiB "
        f"headroom leaves {max(available - headroom_bytes, 0) / gib:.1f} GiB; prewarming would only evict "
        "itself (every re-run reads everything again). Free memory, lower the headroom, or skip the prewarm."
    )
