"""A GPU command's first second: create the CUDA context while the CPU works, skip a probe.

Two one-off costs sit in front of the first kernel of a short command such as the headline
`evolve` (measured: benchmarks/results/h200-2026-11-23-gp/README.md):
- the CUDA context (about 0.2 s, inside the driver with the GIL released): `start_context`
  creates it on a helper thread while the calling thread loads data and numba's CPU target;
  numba keeps one primary context per device, so the caller's later launches simply use it
  (numba's runtime lock serialises a caller that gets there first);
- numba's CPU target, the first time it compiles or loads any function, imports
  `numba.np.arraymath`, whose module body imports scipy.linalg (about 0.4 s) only to learn
  whether np.convolve/np.correlate may call BLAS. `skip_blas_probe` lets that probe fail at
  once; those two functions then use numba's plain loop, and nothing in this project
  compiles them. np.dot and the linalg functions ask for BLAS on their own when compiled,
  so they are unaffected. The skip leans on numba's internals (checked on numba 0.68), so
  it is guarded: it is done only where arraymath's source still holds that probe and uses
  its answer once (`_probe_is_known`), and an import that fails with scipy.linalg hidden is
  left to be done normally later; either way the command only loses the 0.4 s.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path


def start_context(device: str) -> threading.Thread | None:
    """Create the CUDA context on a daemon thread when `device` may be CUDA ("cuda" or
    "auto" with a GPU); None when there is nothing to start. Failures are left for the
    caller's own first CUDA call to report."""
    if device == "cpu":
        return None

    def create() -> None:
        try:
            from gpu.device import cuda_present, cuda_simulated

            if cuda_present() and not cuda_simulated():
                from numba import cuda

                cuda.current_context()
        except Exception:  # noqa: BLE001 - the caller's own CUDA call says what is wrong
            pass

    thread = threading.Thread(target=create, name="cuda-context", daemon=True)
    thread.start()
    return thread


#: the modules whose body runs the probe: numba's CPU target, and numba-cuda's own copy,
#: imported when a CUDA kernel is first compiled or loaded from the cache (measured on the
#: H200, 2026-11-28: 0.48 s of the headline's first kernel load, in scipy.linalg's import)
PROBED_MODULES = ("numba.np.arraymath", "numba.cuda.np.arraymath")


def skip_blas_probe(cuda: bool = False) -> bool:
    """Import numba.np.arraymath (and with `cuda` numba.cuda.np.arraymath, which imports
    numba.cuda) with scipy.linalg hidden, so their BLAS probes fail fast (see the module
    doc). True if a probe was skipped; False if too late (already imported) or scipy.linalg
    is loaded already (then the probe costs nothing)."""
    if "scipy.linalg" in sys.modules:
        return False
    skipped = False
    for name in PROBED_MODULES[: 2 if cuda else 1]:
        if name in sys.modules or not _probe_is_known(name):
            continue
        sys.modules["scipy.linalg"] = None  # type: ignore[assignment]  # its import raises
        try:
            importlib.import_module(name)
            skipped = True
        except ImportError:  # a numba that needs scipy.linalg here: import it normally later
            pass
        finally:
            del sys.modules["scipy.linalg"]
    return skipped


#: the probe's line in numba/np/arraymath.py (numba 0.68) and numba-cuda's copy (0.30.4)
_PROBE_LINE = "_HAVE_BLAS = _check_blas()"


def _probe_is_known(module: str = "numba.np.arraymath") -> bool:
    """Whether `module` (numba's arraymath or numba-cuda's) holds the probe as described in
    the module doc: the assignment, and one reader (np.convolve/np.correlate's inner
    product). Another version, where the answer may gate more, keeps its probe."""
    try:
        spec = importlib.util.find_spec(module)
        text = Path(str(spec.origin if spec else "")).read_text(encoding="utf-8")
    except (ImportError, OSError, UnicodeDecodeError, ValueError):
        return False
    return _PROBE_LINE in text and text.count("_HAVE_BLAS") == 2
