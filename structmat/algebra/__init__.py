"""The closure algebra: the rule table (:mod:`structmat.algebra.rules`), the structured algorithms
behind it, and the semiseparable rank. Importing this package registers the rules."""

from structmat.algebra import rules as _rules  # noqa: F401  (registers the closure rules)
from structmat.algebra.rank import semiseparable_rank

__all__ = ["semiseparable_rank"]
