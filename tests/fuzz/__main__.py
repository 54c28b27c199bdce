"""``python -m tests.fuzz``: the random-kernel fuzzer (JIT vs interpreter on sentinel-framed strided views).

    .venv/bin/python -m tests.fuzz --cases 10000          # ``make fuzz``; FUZZ_CASES / FUZZ_SEED also work
    .venv/bin/python -m tests.fuzz --repro 1234           # print seed 1234's kernel and arguments, run it
    TRN_GUARD=1 .venv/bin/python -m tests.fuzz            # framed buffers between guard pages

Exit status 1 when any case failed (crash, mismatch, sentinel, error, rejected kernel).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _repro(seed: int) -> int:
    import numpy as np

    from tests.fuzz.gen import generate
    from tests.fuzz.harness import EXPLAINED, make_frame, run_case

    case = generate(seed)
    print(f"# seed {seed}: template {case.template}, grid {case.grid}; {'; '.join(case.notes)}")
    print("import trnlang as trn\nimport trnlang.language as tl\n\n@trn.kernel")
    print(case.source)
    rng = np.random.default_rng(seed + 7_777_777)
    for a in case.args:
        f = make_frame(rng, a)
        print(f"# {a.name}: {'out' if a.out else 'in'} {a.dtype}{list(a.shape)} layout {f.layout} strides {f.strides}"
              f" (elements), element 0 at byte {f.offset} of {f.init.size}")
    res = run_case(seed)
    print(f"# result: {res.cls} ({res.secs:.2f} s) {res.detail}")
    return 0 if res.cls in ("ok", *EXPLAINED) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=int(os.environ.get("FUZZ_CASES", "10000")))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", "0")), help="first seed")
    ap.add_argument("--jobs", type=int, default=2, help="child processes at a time")
    ap.add_argument("--batch", type=int, default=250, help="seeds per child process")
    ap.add_argument("--json", help="write every case's record to this file")
    ap.add_argument("--repro", type=int, help="print one seed's kernel and run it in this process")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        from tests.fuzz.session import child

        child(a.start, a.count)
        return 0
    if a.repro is not None:
        return _repro(a.repro)
    from tests.fuzz.session import Summary, run_session

    step = max(1, a.cases // 20)

    def progress(s: Summary) -> None:
        if len(s.records) % step == 0:
            print(f"  {len(s.records)}/{a.cases} cases, {s.wall:.0f} s: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(s.counts.items())), flush=True)

    summary = run_session(a.seed, a.cases, jobs=a.jobs, batch=a.batch, progress=progress)
    print(summary.report())
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"wall": summary.wall, "records": summary.records}, f)
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
