"""The host line every benchmark prints first: CPU model, cores, LLVM's CPU name and the ISA path the JIT takes.

Numbers from different machines (or from one machine with ``TRN_ISA`` forcing a narrower path) are not
comparable; the header says which one produced them::

    from benchmarks._host import print_host
    print_host()   # host: Intel(R) Xeon(R) Processor (2 cores), LLVM cpu emeraldrapids, ISA path avx512 ...
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["cpu_model", "host_line", "print_host"]


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else ``platform.processor()`` or the machine name."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")) and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_line() -> str:
    """One line naming the host and the JIT's code-generation path (see ``codegen.isa``)."""
    from codegen import isa, llvm

    p = isa.selected()
    forced = f", forced by TRN_ISA={os.environ.get('TRN_ISA')}" if isa.forced_name() else ""
    return (f"host: {cpu_model()} ({os.cpu_count()} cores), LLVM cpu {llvm.host_cpu_name()}, "
            f"ISA path {p.name} ({p.describe()}{forced})")


def print_host() -> None:
    """Print :func:`host_line` (the first line of every benchmark's output)."""
    print(host_line(), flush=True)
