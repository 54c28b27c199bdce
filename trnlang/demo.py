"""Placeholder for ``make demo`` (the real demo replaces this module).

Example:
    >>> from trnlang.demo import main
    >>> main()  # doctest: +SKIP
"""

from __future__ import annotations

from trnlang.sim.targets import device_table, get_target


def main() -> None:
    """Print the default target's device table and say that the demo is coming."""
    print(device_table(get_target()))
    print()
    print("The trnlang demo (kernels compiled, run and profiled on the simulated device) is coming.")


if __name__ == "__main__":
    main()
