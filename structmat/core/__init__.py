"""The ground floor: the base class, the closure dispatch, lazy composites, transitions and their joins
(``joined_transitions``: sums keep dense blocks apart), validation, the kept dense forms of small matrices (``small``)
and the numpy views of the CPU host paths (``host``).

Importing this package registers the lazy last resorts of the closure rules.
"""

from structmat.core import lazy as _lazy  # noqa: F401  (registers the lazy last resorts)
from structmat.core.base import StructuredMatrix
from structmat.core.dispatch import Rule, register, rules
from structmat.core.lazy import Inverse, Product, Sum, Transpose
from structmat.core.transitions import Transitions
from structmat.core.validation import SingularMatrixError, skip_finite_checks

__all__ = ["StructuredMatrix", "Rule", "register", "rules", "Inverse", "Product", "Sum", "Transpose", "Transitions",
           "SingularMatrixError", "skip_finite_checks"]
