"""The closure dispatch: rule order (precedence, specificity, registration), conditions, user rules."""

import pytest
import torch
from conftest import F64, close

import structmat as sm
from structmat.core import dispatch


class Ones(sm.StructuredMatrix):
    """A user's class: the all-ones T x T matrix (no rule knows it)."""

    def __init__(self, T, dtype=F64):
        super().__init__((T, T), dtype, "cpu")

    def to_dense(self):
        return torch.ones(self.shape, dtype=self.dtype)

    def _matmat(self, X):
        return X.sum(-2, keepdim=True).expand(*X.shape[:-2], self.shape[-2], X.shape[-1])

    def _map(self, fn):
        return Ones(self.shape[-1], fn(torch.zeros((), dtype=self.dtype)).dtype)

    def _scale(self, s):
        return sm.Dense(self.to_dense() * s)


def test_unknown_pairs_fall_back_to_lazy_composites():
    A, B = Ones(4), sm.Diagonal(torch.arange(1.0, 5.0, dtype=F64))
    for R, want in ((A + B, A.to_dense() + B.to_dense()), (A @ B, A.to_dense() @ B.to_dense())):
        assert isinstance(R, (sm.Sum, sm.Product))
        close(R.to_dense(), want)
    assert isinstance(A.T, sm.Transpose)
    close(A.T @ torch.ones(4, dtype=F64), torch.full((4,), 4.0, dtype=F64))
    with pytest.raises(TypeError, match="no structured Hadamard product for Ones and Ones"):
        A.hadamard(A)


def test_registered_user_rule_wins_over_the_fallback_and_respects_its_condition():
    calls = []

    @sm.register("add", Ones, Ones, when=lambda a, b: a.shape[-1] > 2, result="Dense (test)")
    def ones_plus_ones(a, b):
        calls.append(1)
        return sm.Dense(2 * a.to_dense())

    try:
        assert isinstance(Ones(3) + Ones(3), sm.Dense) and calls == [1]
        assert isinstance(Ones(2) + Ones(2), sm.Sum)  # the condition fails: the next rule (lazy) runs
        assert calls == [1]
        assert dispatch.resolve("add", Ones(3), Ones(3)).result == "Dense (test)"
    finally:
        dispatch._REGISTRY["add"] = [r for r in dispatch._REGISTRY["add"] if r.fn is not ones_plus_ones]


def test_precedence_then_specificity_then_registration_order():
    M = sm.OneSS.from_decays(torch.rand(5, dtype=F64))
    # specificity: the OneSS inverse rule beats the SSS one
    assert dispatch.resolve("inv", M).fn.__name__ == "oness_inverse"
    assert isinstance(M.inv(), sm.Bidiagonal)

    @sm.register("inv", sm.SSS, precedence=10, result="lazy Inverse (test)")
    def forced(a):
        return sm.Inverse(a)

    try:
        assert isinstance(M.inv(), sm.Inverse)  # a higher precedence wins over a closer class
    finally:
        dispatch._REGISTRY["inv"] = [r for r in dispatch._REGISTRY["inv"] if r.fn is not forced]
    assert isinstance(M.inv(), sm.Bidiagonal)


def test_rules_are_evaluated_lazily(monkeypatch):
    """A product of two lower SSS runs the SSS rule only (not the quasiseparable one too)."""
    from structmat.algebra import quasiseparable

    called = []
    monkeypatch.setattr(quasiseparable, "qs_matmul", lambda *a: called.append(1))
    M = sm.SSS(torch.rand(6, 2, dtype=F64), torch.randn(6, 2, dtype=F64), torch.randn(6, 2, dtype=F64))
    assert isinstance(M @ M, sm.SSS) and not called


def test_register_checks_its_arguments():
    with pytest.raises(ValueError, match="op must be one of"):
        sm.register("divide", Ones, Ones)
    with pytest.raises(ValueError, match="takes 2 operand classes"):
        sm.register("add", Ones)
    with pytest.raises(ValueError, match="symmetric applies to add and hadamard only"):
        sm.register("inv", Ones, symmetric=True)


def test_every_rule_names_its_result():
    for rule in sm.rules():
        assert rule.result, rule
        assert rule.op in dispatch.OPERATIONS


def test_rules_on_virtual_subclasses_and_users_rules_checked():
    """A rule on an ABC that a class is registered with (no entry in its MRO) matches without breaking every later
    dispatch of the operation (the distance looked the ABC up in the MRO: ``ValueError``); a user's rule runs with
    the constructors' finiteness checks on (a NaN parameter raises, as outside a rule), a built-in one without."""
    import abc

    class Marker(abc.ABC):  # noqa: B024  (a marker: no abstract methods)
        pass

    Marker.register(sm.Diagonal)
    marker_rule = sm.register("inv", Marker, precedence=-5000)(lambda a: a)

    @sm.register("add", Ones, Ones, precedence=10)
    def nan_sum(a, b):
        return sm.Diagonal(torch.full((a.shape[-1],), float("nan")))

    try:
        close(sm.Diagonal(torch.tensor([2.0, 4.0], dtype=F64)).inv().to_dense(), torch.diag(torch.tensor([0.5, 0.25], dtype=F64)))
        with pytest.raises(ValueError, match="must be finite"):
            Ones(3) + Ones(3)
        assert dispatch.resolve("add", Ones(3), Ones(3)).trusted is False
        assert dispatch.resolve("add", sm.OneSS.causal(3), sm.OneSS.causal(3)).trusted is True
    finally:
        dispatch._REGISTRY["inv"] = [r for r in dispatch._REGISTRY["inv"] if r.fn is not marker_rule]
        dispatch._REGISTRY["add"] = [r for r in dispatch._REGISTRY["add"] if r.fn is not nan_sum]


def test_resolve_names_an_unknown_operation():
    with pytest.raises(ValueError, match="op must be one of"):
        dispatch.resolve("mul", sm.OneSS.causal(3))


def test_a_users_rule_returning_the_wrong_thing_is_named():
    """A user's rule whose result is not a structured matrix of the operation's shape raises at once, naming the
    rule (it went on to fail, or to give wrong shapes, in a later call); a right result passes unchanged."""
    results = {"tensor": lambda a, b: torch.ones(3, 3, dtype=F64),
               "shape": lambda a, b: sm.Diagonal(torch.ones(4, dtype=F64)),
               "batch": lambda a, b: sm.Diagonal(torch.ones(2, 3, dtype=F64)),
               "meta": lambda a, b: sm.Diagonal(torch.ones(3, device="meta"))}
    for what, make in results.items():
        def wrong(a, b, make=make):
            return make(a, b)

        sm.register("matmul", Ones, Ones, precedence=10)(wrong)
        try:
            with pytest.raises(TypeError, match=r"the matmul rule wrong returned .*a StructuredMatrix of shape \(3, 3\) on cpu"):
                Ones(3) @ Ones(3)
        finally:
            dispatch._REGISTRY["matmul"] = [r for r in dispatch._REGISTRY["matmul"] if r.fn is not wrong]
        assert isinstance(Ones(3) @ Ones(3), sm.Product), what
    right = sm.register("inv", Ones, precedence=10)(lambda a: sm.Diagonal(torch.ones(a.shape[-1], dtype=F64)))
    transpose = sm.register("transpose", Ones, precedence=10)(lambda a: sm.Dense(torch.ones(4, 3, dtype=F64)))
    try:
        assert isinstance(Ones(3).inv(), sm.Diagonal)
        with pytest.raises(TypeError, match=r"returned Dense of shape \(4, 3\) on cpu; a StructuredMatrix of shape \(3, 3\)"):
            _ = Ones(3).T
    finally:
        dispatch._REGISTRY["inv"] = [r for r in dispatch._REGISTRY["inv"] if r.fn is not right]
        dispatch._REGISTRY["transpose"] = [r for r in dispatch._REGISTRY["transpose"] if r.fn is not transpose]


def test_register_refuses_rules_that_would_never_run_or_compute_another_matrix():
    """Session 23's audit: ``symmetric`` on a ``matmul`` rule computed ``b @ a`` for ``a @ b``; a transpose rule for a
    subclass of a built-in class (which transposes itself through its own ``T``) was listed and never ran; any type
    and any ``result`` were accepted."""
    class Shifted(sm.Dense):
        pass

    class Scaled(sm.Diagonal):
        pass

    before = {op: list(rules) for op, rules in dispatch._REGISTRY.items()}
    with pytest.raises(ValueError, match="symmetric applies to add and hadamard only"):
        sm.register("matmul", Shifted, sm.Dense, symmetric=True)
    with pytest.raises(ValueError, match="Scaled takes its transpose from Diagonal.T"):
        sm.register("transpose", Scaled)
    with pytest.raises(TypeError, match="operand classes must be StructuredMatrix subclasses .*; got <class 'int'>"):
        sm.register("inv", int)
    with pytest.raises(TypeError, match="result must be a str"):
        sm.register("inv", Shifted, result=3)
    assert {op: list(rules) for op, rules in dispatch._REGISTRY.items()} == before
