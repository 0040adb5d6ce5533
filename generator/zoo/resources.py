"""Peak memory of the whole run: this process and every process it started
(the LocalCluster's nannies and workers, their check-cert processes)."""

from __future__ import annotations

import threading


class PeakMemory:
    """Samples the summed resident set size of this process tree every
    `interval` seconds in a background thread; `peak_bytes` is the largest sum
    seen (a sampled figure: a spike between samples can be missed)."""

    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while True:
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:  # exited between listing and reading
                    pass
            self.peak_bytes = max(self.peak_bytes, total)
            if self._stop.wait(self.interval):
                return
