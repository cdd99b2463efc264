"""Start-up hook of the Python processes the tests start under NUMBA_ENABLE_CUDASIM=1
(tests/conftest.py puts this folder on their PYTHONPATH): once numba's simulator is
imported, tests/cuda_simulator.py's speed-ups are installed, so an option worker process
simulates its kernels as fast as the test process does. Any other import is untouched,
and nothing happens unless the simulator is on."""

from __future__ import annotations

import os
import sys
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder
from importlib.util import module_from_spec, spec_from_file_location
from types import ModuleType
from typing import Any

_SIMULATOR = "numba.cuda.simulator.kernel"


def _install() -> None:
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "cuda_simulator.py")
    spec = spec_from_file_location("_tests_cuda_simulator", path)
    assert spec is not None and spec.loader is not None
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install()


class _AfterSimulatorImport(MetaPathFinder):
    """Finds numba's simulator module as the path finder does, and installs the speed-ups
    right after it has run (then leaves sys.meta_path)."""

    def find_spec(self, name: str, path: Any, target: ModuleType | None = None
                  ) -> ModuleSpec | None:
        if name != _SIMULATOR:
            return None
        sys.meta_path.remove(self)
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader: Loader = spec.loader
        run_module = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            _install()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1" and _SIMULATOR not in sys.modules:
    sys.meta_path.insert(0, _AfterSimulatorImport())
