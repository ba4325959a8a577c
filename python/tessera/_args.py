"""Integer arguments checked before they reach C++. pybind11 answers an int outside the C++ type
with "incompatible function arguments", which names neither the argument nor the range; these
checks raise a ValueError that names both."""
from __future__ import annotations

import numpy as np

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT64 = (0, 2**64 - 1)
# Thread counts: 0 means every core; the C++ side takes an int.
THREADS = (0, 2**31 - 1)


def int_arg(name, value, lo, hi):
    """`value` as a Python int in [lo, hi], else ValueError naming `name`."""
    try:
        i = int(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if not lo <= i <= hi:
        raise ValueError(f"{name} = {i} is outside [{lo}, {hi}]")
    return i


def int_values(name, array, lo, hi):
    """Raises ValueError naming `name` if an integer array holds a value outside [lo, hi]."""
    a = np.asarray(array)
    if a.size and (a.min() < lo or a.max() > hi):
        bad = a.min() if a.min() < lo else a.max()
        raise ValueError(f"{name} holds {int(bad)}, outside [{lo}, {hi}]")
    return a
