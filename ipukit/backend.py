"""The array backend: NumPy, or CuPy on a CUDA GPU.

This is the only module that imports CuPy. Everything that stores tensor data or runs
vertices asks here for ``xp`` (the array module) and hands results back with ``to_numpy``.

Choose with the environment variable ``IPUKIT_BACKEND``:

* ``numpy`` (default): plain NumPy on the CPU.
* ``cupy``: CuPy on a CUDA GPU; an error explains why when CuPy is unusable.
* ``auto``: CuPy when ``cupy.is_available()``, otherwise NumPy.

>>> from ipukit import backend
>>> backend.name() in ("numpy", "cupy")
True
"""

from __future__ import annotations

import os

import numpy as np

from .errors import IpuError


class BackendError(IpuError):
    """The requested array backend cannot be used here."""


def _load_cupy():
    """Return the cupy module if it imports and sees a GPU, else (None, reason)."""
    try:
        import cupy  # noqa: PLC0415 - the one place cupy is imported
    except Exception as exc:  # ImportError, or a broken CUDA install
        return None, f"cupy does not import ({exc.__class__.__name__}: {exc})"
    try:
        if not cupy.is_available():
            return None, "cupy imports but cupy.is_available() is False (no CUDA GPU)"
    except Exception as exc:
        return None, f"cupy.is_available() failed ({exc})"
    return cupy, ""


def _choose(requested: str):
    requested = requested.strip().lower() or "numpy"
    if requested == "numpy":
        return np
    if requested in ("cupy", "auto"):
        cupy, reason = _load_cupy()
        if cupy is not None:
            return cupy
        if requested == "auto":
            return np
        raise BackendError(
            f"IPUKIT_BACKEND=cupy was requested but {reason}. Install the GPU extra "
            "(pip install -e '.[gpu]') on a machine with a CUDA 12 GPU, or set "
            "IPUKIT_BACKEND=numpy (or auto, which falls back to NumPy)."
        )
    raise BackendError(
        f"IPUKIT_BACKEND={requested!r} is not a backend; use numpy, cupy or auto."
    )


xp = _choose(os.environ.get("IPUKIT_BACKEND", "numpy"))


def name() -> str:
    """``"numpy"`` or ``"cupy"``: the backend in use."""
    return "numpy" if xp is np else "cupy"


def use(requested: str) -> None:
    """Switch backend at run time (``"numpy"``, ``"cupy"`` or ``"auto"``).

    Objects already created keep the arrays they hold; call this before building.
    """
    global xp
    xp = _choose(requested)


def get_xp():
    """The array module in use now (``numpy`` or ``cupy``)."""
    return xp


def cupy_available() -> bool:
    """True when CuPy imports and sees a CUDA GPU."""
    return _load_cupy()[0] is not None


def to_numpy(a) -> np.ndarray:
    """Return ``a`` as a NumPy array (copies from the GPU when needed)."""
    get = getattr(a, "get", None)  # a device array: an explicit copy to the host
    if get is not None and not isinstance(a, np.generic):
        return get()
    return a if type(a) is np.ndarray else np.asarray(a)


def module_of(a):
    """The array module that holds ``a``: NumPy for host arrays and scalars, else the
    backend's (``cupy.get_array_module`` without importing CuPy here)."""
    return np if isinstance(a, (np.ndarray, np.generic, int, float)) else xp


def like(a, ref):
    """``a`` on the same side as ``ref``: a NumPy array if ``ref`` is on the host, else an
    array of the backend in use (no copy when ``a`` is already there)."""
    return to_numpy(a) if module_of(ref) is np else xp.asarray(a)


def asarray(a, dtype=None):
    """Put ``a`` on the backend in use."""
    return xp.asarray(a, dtype=dtype)


def strided(pool, offset: int, shape: tuple, strides: tuple):
    """A view of the flat array ``pool`` from element ``offset``, ``shape`` with element
    ``strides`` (>= 0), nothing copied: ``np.ndarray`` over the buffer on NumPy (about a
    ninth of ``as_strided``'s time), ``as_strided`` on CuPy."""
    strides = tuple(s * pool.itemsize for s in strides)
    if type(pool) is np.ndarray:
        return np.ndarray(shape, pool.dtype, pool, offset * pool.itemsize, strides)
    return xp.lib.stride_tricks.as_strided(pool[offset:], shape, strides)


def rows(view, n: int):
    """``view`` (an array or None) as (n, ...), its first axis split, where that axis is a
    multiple of ``n`` other than ``n`` itself (always a view, nothing copied); else ``view``."""
    if view is None or not n or view.shape[0] == n or view.shape[0] % n:
        return view
    return view.reshape(n, -1, *view.shape[1:])


def synchronize() -> None:
    """Wait for queued GPU work (a no-op on NumPy); benchmarks call this."""
    if xp is not np:
        xp.cuda.Device().synchronize()
