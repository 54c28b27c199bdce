"""Keyword arguments and defaults at a ``@trn.kernel`` call (mapped to positions at the call's entry)."""

import numpy as np
import pytest

import trnlang as trn
import trnlang.language as tl


@trn.kernel
def scale_add(x, out, scale=2.0, add=0.0):
    tl.store(out[0:4, 0:8], tl.load(x[0:4, 0:8]) * scale + add)


def test_keywords_and_defaults():
    x = np.ones((4, 8), np.float32)
    o = np.zeros_like(x)
    scale_add(x, o, add=1.0)
    assert np.all(o == 3.0)
    scale_add(x, out=o, scale=3.0)
    assert np.all(o == 3.0)
    scale_add[1](x, o, add=5.0)
    assert np.all(o == 7.0)


def test_unknown_keyword_names_the_call():
    x = np.ones((4, 8), np.float32)
    with pytest.raises(trn.LaunchError, match="unexpected keyword argument 'bogus'") as ei:
        scale_add(x, x, bogus=1)
    assert "test_kernel_kwargs.py" in str(ei.value)
