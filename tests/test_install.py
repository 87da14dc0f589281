"""Installation: ``import structmat`` (and its layers) works without the optional Triton."""

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import importlib.abc, sys

class NoTriton(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "triton":
            raise ModuleNotFoundError(f"No module named {name!r}")

sys.meta_path.insert(0, NoTriton())
import torch
import structmat as sm, structmat.nn
x, B = torch.ones(1, 4, 1, 2), torch.ones(1, 4, 1, 2)
assert sm.ssd(x, torch.ones(1, 4, 1), -torch.ones(1), B, B, 2).shape == (1, 4, 1, 2)
assert sm.sma(B, B, x, sm.OneSS.causal(4)).shape == (1, 4, 1, 2)
structmat.nn.Mamba2(8, d_state=4, headdim=4, chunk_size=4)(torch.ones(1, 4, 8))
assert not any(m.split(".")[0] == "triton" for m in sys.modules)
# every module, the Triton kernels' included (DESIGN.md: importable without Triton); a launch says why it cannot run
import importlib, pkgutil
for m in pkgutil.walk_packages(sm.__path__, "structmat."):
    importlib.import_module(m.name)
from structmat.kernels import ssd_step_triton
try:
    ssd_step_triton.ssd_step_kernel[(1,)]()
except ImportError as e:
    assert "Triton is not installed" in str(e)
else:
    raise AssertionError("a kernel launched without Triton")
"""


def test_import_and_cpu_paths_without_triton():
    root = Path(__file__).parents[1]
    run = subprocess.run([sys.executable, "-c", SCRIPT], cwd=root, capture_output=True, text=True, timeout=300,
                         env={"PATH": "", "PYTHONPATH": str(root)})
    assert run.returncode == 0, run.stderr[-2000:]


IMPORT_COST = """
import sys
import numpy, scipy.linalg, torch
before = set(sys.modules)
import structmat, structmat.nn
print(" ".join(sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("torch", "scipy"))))
"""


def test_import_loads_neither_the_compiler_nor_scipy_signal():
    """``import structmat`` stays near torch's own import time: ``torch._dynamo`` (about a second) loads only when a
    user compiles, ``scipy.signal`` (0.2-0.4 s) at the first solve with one decay for all steps."""
    root = Path(__file__).parents[1]
    run = subprocess.run([sys.executable, "-c", IMPORT_COST], cwd=root, capture_output=True, text=True, timeout=300,
                         env={"PATH": "", "PYTHONPATH": str(root)})
    assert run.returncode == 0, run.stderr[-2000:]
    loaded = run.stdout.split()
    assert not [m for m in loaded if m.startswith(("torch._dynamo", "scipy.signal"))], loaded
