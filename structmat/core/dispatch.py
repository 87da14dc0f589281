"""The closure dispatch: operations on structured matrices resolved by rules held as data.

A :class:`Rule` names its operation (``"add"``, ``"matmul"``, ``"hadamard"``, ``"inv"``,
``"transpose"``), the operand classes it accepts, a condition on the operands, a precedence and the
result it documents. For ``op(a, b)`` the registry lists the rules whose classes match the
operands (``isinstance``), orders them by

1. ``precedence``, highest first;
2. specificity: the summed distance, in each operand's method resolution order, from the operand's
   class to the rule's class (closest first), so a ``OneSS`` rule beats an ``SSS`` rule;
3. registration order,

and calls the first whose condition holds. Conditions are cheap predicates on the operands
(orientation, causality, kind of transitions); a rule is only ever called when it applies, so no
result is computed and thrown away. The lazy composites register the last resorts (a lazy
``Sum``, ``Product``, ``Inverse``, ``Transpose``) at precedence :data:`FALLBACK`. The concrete
closure rules live in :mod:`structmat.algebra.rules`; users add theirs with :func:`register`.
"""

from __future__ import annotations

import abc
import itertools
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from structmat.core.validation import check_flag, trusted_call

__all__ = ["Rule", "register", "rules", "resolve", "apply", "OPERATIONS", "FALLBACK", "NoRuleError"]

#: Operations the registry knows, with their arity.
OPERATIONS = {"add": 2, "matmul": 2, "hadamard": 2, "inv": 1, "transpose": 1}

#: Precedence of the lazy last resorts: below every default rule.
FALLBACK = -1000

_counter = itertools.count()


class NoRuleError(TypeError):
    """No rule applies to the operands (only ``hadamard`` has no lazy last resort)."""


@dataclass(frozen=True)
class Rule:
    """One closure rule: ``fn(*operands)`` computes ``op`` for operands of ``classes`` when ``when`` holds; among
    the rules that match, the highest ``precedence`` wins, then the nearest classes, then the first registered.

    Examples
    --------
    >>> import structmat as sm
    >>> from structmat.core.dispatch import resolve
    >>> rule = resolve("add", sm.OneSS.causal(3), sm.OneSS.causal(3))  # (a OneSS is an SSS)
    >>> rule.op, [c.__name__ for c in rule.classes], rule.result
    ('add', ['SSS', 'SSS'], 'SSS, orders add (block-diagonal A)')
    """

    op: str
    classes: tuple[type, ...]
    fn: Callable[..., Any]
    when: Callable[..., bool] | None = None
    precedence: int = 0
    result: str = ""
    doc: str = ""
    trusted: bool = False  # runs without the constructors' finiteness checks (the built-in rules)
    serial: int = field(default_factory=lambda: next(_counter), compare=False)

    def matches(self, operands: tuple) -> bool:
        return all(isinstance(x, cls) for x, cls in zip(operands, self.classes))

    def applies(self, operands: tuple) -> bool:
        return self.matches(operands) and (self.when is None or bool(self.when(*operands)))

    def distance(self, operands: tuple) -> int:
        """How far the rule's classes sit above the operands' in their MROs; a class matched without being in the
        MRO (an ABC's virtual subclass, a runtime-checkable Protocol) counts as past the MRO's end."""
        return sum(_mro_distance(type(x), cls) for x, cls in zip(operands, self.classes))

    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", repr(self.fn))


def _mro_distance(kind: type, cls: type) -> int:
    mro = kind.__mro__
    return mro.index(cls) if cls in mro else len(mro)


_REGISTRY: dict[str, list[Rule]] = {op: [] for op in OPERATIONS}


def register(op: str, *classes: type, when: Callable[..., bool] | None = None, precedence: int = 0,
             result: str = "", doc: str = "", symmetric: bool = False, trusted: bool = False) -> Callable:
    """Decorator: add a closure rule for ``op`` on operands of ``classes``.

    Parameters
    ----------
    op : {"add", "matmul", "hadamard", "inv", "transpose"}
    *classes : type
        One class per operand (two for binary operations).
    when : callable, optional
        Condition on the operands; the rule is skipped where it returns False.
    precedence : int
        Higher is tried first (default 0; the lazy last resorts have :data:`FALLBACK`).
    result : str
        The documented result (shown in the rule table).
    symmetric : bool
        Also register the rule with the operands swapped (for ``add`` and ``hadamard``).
    trusted : bool
        Run the rule without the constructors' finiteness checks (default False: a user's rule that builds a NaN
        parameter raises, as the same constructor outside a rule does) and without checking its result (default
        False: a result that is not a ``StructuredMatrix`` of the operation's shape on the operands' device raises a
        ``TypeError`` naming the rule). The built-in rules set it: they build results from operands checked when they
        were made, and check overflow where it can arise.

    Examples
    --------
    A user's class and a rule for it (the class is a diagonal of ones times a scalar):

    >>> import torch, structmat as sm
    >>> class Scaled(sm.Diagonal):
    ...     pass
    >>> @sm.register("matmul", Scaled, Scaled, result="Scaled")
    ... def _scaled_product(a, b):
    ...     return Scaled(a.d * b.d)
    >>> type(Scaled(torch.ones(3)) @ Scaled(torch.ones(3))).__name__
    'Scaled'
    """
    _check_op(op)
    if len(classes) != OPERATIONS[op]:
        raise ValueError(f"{op} takes {OPERATIONS[op]} operand classes; got {len(classes)}")
    for cls in classes:  # a non-class would break isinstance in every later dispatch of op
        if not (isinstance(cls, type) and (getattr(cls, "__structured_matrix__", False) or isinstance(cls, abc.ABCMeta))):
            raise TypeError(f"operand classes must be StructuredMatrix subclasses (or ABCs they register with); got {cls!r}")
    if op == "transpose" and getattr(classes[0], "__structured_matrix__", False) and (owner := _own_transpose(classes[0])):
        raise ValueError(f"{classes[0].__name__} takes its transpose from {owner.__name__}.T, which no transpose rule "
                         f"reaches: override the property T in {classes[0].__name__} instead")
    if not isinstance(result, str):
        raise TypeError(f"result must be a str (the rule table's text); got {type(result).__name__}")
    if when is not None and not callable(when):
        raise TypeError(f"when must be a callable condition on the operands, or None; got {type(when).__name__}")
    if isinstance(precedence, bool) or not isinstance(precedence, numbers.Integral):
        raise TypeError(f"precedence must be an int; got {precedence!r}")
    symmetric, trusted = check_flag(symmetric, "symmetric"), check_flag(trusted, "trusted")
    if symmetric and op not in ("add", "hadamard"):
        raise ValueError(f"symmetric applies to add and hadamard only (a {op} rule with its operands swapped would "
                         f"compute another matrix); got op={op!r}")

    def add(fn: Callable) -> Callable:
        if not callable(fn):
            raise TypeError(f"the rule must be a callable fn(*operands); got {type(fn).__name__}")
        _REGISTRY[op].append(Rule(op, tuple(classes), fn, when, precedence, result, doc or (fn.__doc__ or ""), trusted))
        if symmetric and classes[0] is not classes[1]:
            swapped_when = None if when is None else (lambda a, b: when(b, a))
            _REGISTRY[op].append(Rule(op, tuple(reversed(classes)), _swapped(fn), swapped_when, precedence, result,
                                      doc or (fn.__doc__ or ""), trusted))
        return fn

    return add


def _own_transpose(cls: type) -> type | None:
    """The class below the root whose own ``T`` property ``cls`` inherits (the built-in classes transpose themselves
    without dispatch), or None where ``T`` is the root's, which dispatches."""
    root = next(c for c in reversed(cls.__mro__) if "__structured_matrix__" in vars(c))
    owner = next(c for c in cls.__mro__ if "T" in vars(c))
    return None if owner is root else owner


def _swapped(fn: Callable) -> Callable:
    def swapped(a, b):
        return fn(b, a)

    swapped.__name__ = f"{getattr(fn, '__name__', 'rule')} (swapped)"
    return swapped


def _check_op(op: Any) -> None:
    if not (isinstance(op, str) and op in OPERATIONS):
        raise ValueError(f"op must be one of {sorted(OPERATIONS)}; got {op!r}")


def rules(op: str | None = None) -> list[Rule]:
    """The registered rules: of one operation in registration order, or all of them grouped by operation
    (``add``, ``matmul``, ``hadamard``, ``inv``, ``transpose``), each group in registration order.

    Examples
    --------
    >>> import structmat as sm
    >>> {r.op for r in sm.rules("inv")}, len(sm.rules()) > len(sm.rules("inv"))
    ({'inv'}, True)
    """
    if op is None:
        return [r for op_rules in _REGISTRY.values() for r in op_rules]
    _check_op(op)
    return list(_REGISTRY[op])


#: ``(op, operand types) -> (a copy of the registry of op when sorted, its matching rules in the order they are
#: tried)``: matching and ordering depend on the operands' types only, and cost more than a small closure operation.
_CANDIDATES: dict[tuple, tuple[list[Rule], list[Rule]]] = {}


def _candidates(op: str, operands: tuple) -> list[Rule]:
    """The rules matching ``operands`` in the order they are tried, cached by types (and checked against the
    registry as it is now, so rules added or removed, even by editing the registry's lists, count at once)."""
    registry = _REGISTRY.get(op)
    if registry is None:
        _check_op(op)
    key = (op, *map(type, operands))
    cached = _CANDIDATES.get(key)
    if cached is not None and cached[0] == registry:  # the same rules: list equality sees identity first
        return cached[1]
    candidates = [r for r in registry if r.matches(operands)]
    candidates.sort(key=lambda r: (-r.precedence, r.distance(operands), r.serial))
    _CANDIDATES[key] = (list(registry), candidates)
    return candidates


def resolve(op: str, *operands) -> Rule | None:
    """The rule ``op(*operands)`` runs (see the module docstring for the order), or None."""
    for r in _candidates(op, operands):  # (a loop: a generator costs more than most conditions)
        if r.when is None or r.when(*operands):
            return r
    return None


def apply(op: str, *operands):
    """Run ``op`` on the operands by the first applicable rule."""
    rule = resolve(op, *operands)
    if rule is None:
        names = ", ".join(type(x).__name__ for x in operands)
        raise NoRuleError(f"no structured {op} for {names}")
    if rule.trusted:
        return trusted_call(rule.fn, *operands)  # the operands were checked when they were made
    return _checked_result(rule, operands, rule.fn(*operands))


def _expected_shape(op: str, operands: tuple) -> tuple[int, ...] | None:
    """The shape of ``op``'s result (operands of equal or broadcastable batches, as the operators checked)."""
    a = operands[0].shape
    if op == "inv":
        return tuple(a)
    if op == "transpose":
        return (*a[:-2], a[-1], a[-2])
    b = operands[1].shape
    try:
        batch = tuple(torch.broadcast_shapes(a[:-2], b[:-2]))
    except RuntimeError:
        return None
    return (*batch, a[-2], b[-1]) if op == "matmul" else (*batch, *a[-2:])


def _checked_result(rule: Rule, operands: tuple, result):
    """A user's rule's result: a structured matrix of the operation's shape on the operands' device (its mistakes
    surface here, named, rather than in a later call on a matrix of the wrong shape)."""
    want = _expected_shape(rule.op, operands)
    if not getattr(result, "__structured_matrix__", False) or isinstance(result, type) or \
            (want is not None and tuple(result.shape) != want) or result.device != operands[0].device:
        got = f"{type(result).__name__}" + (f" of shape {tuple(result.shape)} on {result.device}"
                                            if getattr(result, "__structured_matrix__", False) else "")
        raise TypeError(f"the {rule.op} rule {rule.name} returned {got}; a StructuredMatrix of shape {want} on "
                        f"{operands[0].device} was expected")
    return result
