"""``trnlang.language`` (``tl``): the tile-level kernel language (LANGUAGE.md sections 1-5).

Example:
    >>> import trnlang as trn
    >>> import trnlang.language as tl
    >>> @trn.kernel
    ... def double(x, out):
    ...     t = tl.load(x[0:4, 0:8])
    ...     tl.store(out[0:4, 0:8], t * 2)
"""

from trnlang.language.core import *  # noqa: F401,F403
from trnlang.language.core import __all__  # noqa: F401


def __getattr__(name: str) -> object:
    """A missing builtin: an AttributeError that names the closest builtins and where they are listed."""
    from trnlang.frontend.errors import missing_name

    raise missing_name("trnlang.language", name, __all__, "docs/language_reference.md")
