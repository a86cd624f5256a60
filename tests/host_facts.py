"""Facts about the host that timing tests depend on, for messages and the suite's summary."""

import os
from pathlib import Path


def cpu_and_caches() -> str:
    """The CPU's model and the caches the kernel lists for CPU 0 (timing tests depend on
    them: the suite's summary names them, and so does a cache test's failure)."""
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "an unnamed CPU",
    )
    try:
        caches = sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"))
        sizes = [
            f"L{(c / 'level').read_text().strip()} {(c / 'type').read_text().strip()} "
            f"{(c / 'size').read_text().strip()}"
            for c in caches
        ]
    except OSError:
        sizes = ["unreadable"]
    return f"{model}, {len(os.sched_getaffinity(0))} CPUs, caches {', '.join(sizes)}"
