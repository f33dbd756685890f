"""GPU utilisation sampled with nvidia-smi while the benchmark's highest level runs (the article: 94-96 %)."""

from __future__ import annotations

import subprocess
import threading
from typing import Any


class GpuSampler:
    """`nvidia-smi --query-gpu=utilization.gpu` every `interval` seconds in a thread, between start() and stop()."""

    def __init__(self, nvidia_smi: str, interval: float = 1.0) -> None:
        self.nvidia_smi, self.interval = nvidia_smi, interval
        self.samples: list[list[float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                out = subprocess.run(
                    [self.nvidia_smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout
                values = [float(v) for v in out.split()]
            except (OSError, ValueError, subprocess.TimeoutExpired):
                continue
            if values:
                self.samples.append(values)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, Any] | None:
        self._stop.set()
        self._thread.join()
        if not self.samples:
            return None
        gpus = min(len(s) for s in self.samples)
        per_gpu = [sum(s[i] for s in self.samples) / len(self.samples) for i in range(gpus)]
        return {
            "samples": len(self.samples),
            "mean_pct": round(sum(per_gpu) / gpus, 1),
            "per_gpu_mean_pct": [round(v, 1) for v in per_gpu],
        }
