"""A small FileCheck: ``CHECK`` / ``CHECK-NEXT`` / ``CHECK-SAME`` / ``CHECK-NOT`` lines matched over a text dump.

Each directive is ``<KIND>: <pattern>``; the pattern is literal text in which ``{{...}}`` is a
regular expression. ``CHECK`` finds the pattern on the current line (after the previous match) or a
later one; ``CHECK-NEXT`` on the line right after the previous match; ``CHECK-SAME`` further on the
previous match's line; ``CHECK-NOT`` must not occur between the previous match and the next positive
match (or the end of the text).

Example:
    >>> filecheck("a = 1\\nb = 2\\n", '''
    ...     CHECK: a = {{[0-9]+}}
    ...     CHECK-NOT: c =
    ...     CHECK-NEXT: b
    ... ''')
"""

from __future__ import annotations

import re

_DIRECTIVE = re.compile(r"^\s*(CHECK(?:-NEXT|-SAME|-NOT)?):\s?(.*?)\s*$")


class CheckFailure(AssertionError):
    """A directive did not hold; the message names it and shows where the search was."""


def _compile(pattern: str) -> re.Pattern[str]:
    out, pos = [], 0
    for m in re.finditer(r"\{\{(.*?)\}\}", pattern):
        out.append(re.escape(pattern[pos:m.start()]))
        out.append(f"(?:{m.group(1)})")
        pos = m.end()
    out.append(re.escape(pattern[pos:]))
    return re.compile("".join(out))


def _context(lines: list[str], at: int) -> str:
    lo, hi = max(0, at - 2), min(len(lines), at + 3)
    return "\n".join(f"  {'>' if k == at else ' '} {k + 1:4}: {lines[k]}" for k in range(lo, hi))


def filecheck(text: str, checks: str) -> None:
    """Match the ``checks`` directives against ``text``; raises :class:`CheckFailure` on the first that fails."""
    lines = text.splitlines()
    directives = [(m.group(1), m.group(2)) for m in map(_DIRECTIVE.match, checks.splitlines()) if m]
    if not directives:
        raise ValueError("no CHECK directives")
    line, col = 0, 0  # where the previous positive match ended
    nots: list[tuple[str, re.Pattern[str]]] = []
    for kind, pat in directives:
        rx = _compile(pat)
        if kind == "CHECK-NOT":
            nots.append((pat, rx))
            continue
        if kind == "CHECK-SAME":
            m = rx.search(lines[line], col) if line < len(lines) else None
            found = (line, m) if m else None
        elif kind == "CHECK-NEXT":
            nxt = line + 1
            m = rx.search(lines[nxt]) if nxt < len(lines) else None
            found = (nxt, m) if m else None
        else:
            found = None
            for k in range(line, len(lines)):
                m = rx.search(lines[k], col if k == line else 0)
                if m:
                    found = (k, m)
                    break
        if found is None:
            raise CheckFailure(f"{kind}: {pat!r} not found after line {line + 1}:\n{_context(lines, line)}")
        k, m = found
        _no_match(lines, nots, (line, col), (k, m.start()))
        nots = []
        line, col = k, m.end()
    _no_match(lines, nots, (line, col), (len(lines), 0))


def _no_match(lines: list[str], nots: list[tuple[str, re.Pattern[str]]], start: tuple[int, int],
              end: tuple[int, int]) -> None:
    for pat, rx in nots:
        for k in range(start[0], min(end[0] + 1, len(lines))):
            lo = start[1] if k == start[0] else 0
            hi = end[1] if k == end[0] else len(lines[k])
            if rx.search(lines[k][:hi], lo):
                raise CheckFailure(f"CHECK-NOT: {pat!r} found on line {k + 1}:\n{_context(lines, k)}")
