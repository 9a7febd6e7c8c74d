"""The compute backend: `Backend` (auto, numpy, cupy) and its resolution.

`Backend` is a `StrEnum`: its values are the strings of the configuration (`backend:` in
YAML, `SAFEMON_BACKEND`) and of the `--backend` options, so a member compares equal to its
string and serialises as it. Code asks the member what it means (`on_device`, `resolved`)
instead of comparing strings. Importing this module imports no CUDA code (`resolve` does,
when called).
"""

from __future__ import annotations

from enum import StrEnum

from safemon.errors import BackendUnavailableError, InvalidInputError

__all__ = ["BACKENDS", "Backend", "resolve_backend"]


class Backend(StrEnum):
    """Where a matrix product runs.

    AUTO: CuPy when a CUDA device is usable, else NumPy (resolved at start-up).
    NUMPY: the NumPy reference on the CPU (bit-exact mirror of the kernels).
    CUPY: the CUDA kernels on the current device, through CuPy.
    """

    AUTO = "auto"
    NUMPY = "numpy"
    CUPY = "cupy"

    @classmethod
    def parse(cls, name: str) -> Backend:
        """The member named `name` ("auto", "numpy" or "cupy"; a member is returned as is).

        Raises:
            InvalidInputError: any other name (a ValueError).
        """
        try:
            return cls(name)
        except ValueError:
            raise InvalidInputError(
                f"unknown backend {name!r}; known: {', '.join(BACKENDS)}"
            ) from None

    @property
    def resolved(self) -> bool:
        """True for NUMPY and CUPY: the backend is known (AUTO is not yet)."""
        return self is not Backend.AUTO

    @property
    def on_device(self) -> bool:
        """True for CUPY: arrays live in GPU memory and kernels run on the device."""
        return self is Backend.CUPY

    def resolve(self) -> Backend:
        """AUTO → CUPY when a CUDA device is usable, else NUMPY; the others unchanged.

        Raises:
            BackendUnavailableError: CUPY without CuPy or a usable device.
        """
        from safemon.kernels.compiler import cuda_available, import_cupy

        if self is Backend.AUTO:
            return Backend.CUPY if cuda_available() else Backend.NUMPY
        if self is Backend.CUPY and not cuda_available():
            import_cupy()  # raises BackendUnavailableError with the reason
            raise BackendUnavailableError("the cupy backend is not usable here")
        return self


#: The backend names, in the order the help texts list them.
BACKENDS: tuple[str, ...] = tuple(b.value for b in Backend)


def resolve_backend(backend: str) -> Backend:
    """`Backend.parse(backend).resolve()`: the backend a run uses (never AUTO).

    Raises:
        InvalidInputError: unknown backend name (a ValueError).
        BackendUnavailableError: "cupy" asked for without CuPy or a device.
    """
    return Backend.parse(backend).resolve()
