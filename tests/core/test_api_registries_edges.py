"""The registries, the planner's arguments, ``structmat.testing`` and the tour at their edges (defects D102-D110, found
by the session-21 audit of interop, testing and the registries).

References: the dense float64 computation, the registries as they were before a call."""

import dataclasses
import math

import pytest
import torch
from conftest import F64
from hypothesis import HealthCheck, given, settings

import structmat as sm
import structmat.testing as smt
import structmat.tour as tour
from structmat.attention import ORDERS, Order, register_order, tuning_for
from structmat.attention.orders import Cost

_QUICK = settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def _draw(strategy) -> None:
    """One draw of ``strategy`` (errors in drawing propagate)."""
    @settings(max_examples=1, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def once(_):
        pass

    once()


class _Dense(Order):
    name = "audit_dense"

    def admissible(self, mask):
        return True

    def cost(self, problem, mask, tuning):
        return Cost(1.0, 1.0, 1)

    def run(self, q, k, v, mask, scale, tuning, chunk):
        return torch.einsum("bthn,bshn,ts,bshp->bthp", q, k, mask.to_dense().to(q.dtype), v) * scale


def test_register_order_takes_order_instances_only():
    """D102: the ``Order`` class itself (``register_order(_Dense)``, the ``()`` forgotten) was registered, and every
    later ``sma(order="auto")``, ``sma_plan`` and ``nn.SMA`` forward raised."""
    before = dict(ORDERS)
    for bad, error in ((_Dense, TypeError), ("foo", TypeError), (None, TypeError)):
        with pytest.raises(error, match="order must be an Order instance"):
            register_order(bad)
    for name in ("", "auto", 3):
        order = _Dense()
        order.name = name
        with pytest.raises(ValueError, match="non-empty string other than 'auto'"):
            register_order(order)
    assert ORDERS == before
    q = k = v = torch.randn(1, 6, 2, 3, dtype=F64)
    M = sm.OneSS.causal(6, dtype=F64)
    torch.testing.assert_close(sm.sma(q, k, v, M), sm.sma(q, k, v, M, order="quadratic"))


def test_assert_matches_dense_against_float64_and_on_empty_operands():
    """D103, D104: the helper compared a bfloat16 matrix with its own bfloat16 dense form (7e-4 off the exact product,
    where the structured one was 8e-6 off), and raised ``IndexError`` for an empty batch or ``K = 0``."""
    bf = torch.bfloat16  # drawn by structured_matrices(T=4, dtype=bfloat16): the product cancels to 6e-3
    M = sm.LowRank(torch.tensor([[-0.0078125], [0.5390625], [-0.82421875], [-0.734375]], dtype=bf),
                   torch.tensor([[0.2890625], [-0.46484375], [-0.484375], [-0.05859375]], dtype=bf))
    smt.assert_matches_dense(M)
    smt.assert_matches_dense(sm.OneSS.from_decays(torch.rand(0, 4, dtype=F64)))
    smt.assert_matches_dense(sm.OneSS.from_decays(torch.rand(4, dtype=F64)), K=0)
    with pytest.raises(AssertionError, match="max error"):  # and still fails where the matrix is wrong
        smt.assert_matches_dense(_WrongProduct(torch.rand(4, dtype=F64)))


class _WrongProduct(sm.Diagonal):
    def _matmat(self, X):
        return super()._matmat(X) * 1.001


def test_the_tour_counts_a_nan_result_as_a_mismatch(monkeypatch):
    """D105: ``max(worst, nan)`` kept ``worst``: a NaN result printed "all match" and exited 0."""
    rows = [("OneSS", "@", "Tensor", "1", 1e-16, 0.001), ("SSS", "@", "Tensor", "2", math.nan, 0.001)]
    monkeypatch.setattr(tour, "run_tour", lambda T: rows)
    assert tour.main(8) == 1
    monkeypatch.setattr(tour, "run_tour", lambda T: rows[:1])
    assert tour.main(8) == 0


def test_register_flags_must_be_bools():
    """D106: ``symmetric="no"`` registered the swapped rule, ``trusted="no"`` turned off the result check (D72)."""
    before = sm.rules()
    for kw in (dict(symmetric="no"), dict(trusted="no")):
        with pytest.raises(TypeError, match=f"{next(iter(kw))} must be a bool"):
            sm.register("add", sm.Diagonal, sm.Diagonal, **kw)
    assert sm.rules() == before


def test_testing_strategies_respect_dtype_and_batch():
    """D107: ``one_ss(dtype=complex128)`` drew float64 matrices, ``matrices_of(StructuredMatrix, batch=(2,))`` DFTs
    without a batch; ``dfts(batch=(2,))`` ignored the batch."""
    @_QUICK
    @given(smt.one_ss(T=5, dtype=torch.complex128))
    def complex_one_ss(M):
        assert M.dtype == torch.complex128

    @_QUICK
    @given(smt.matrices_of(sm.StructuredMatrix, T=3, batch=(2,)))
    def batched(M):
        assert M.batch_shape == (2,), type(M).__name__

    complex_one_ss()
    batched()
    with pytest.raises(ValueError, match="a DFT has no batch"):
        _draw(smt.dfts(batch=(2,)))
    with pytest.raises(TypeError, match="no strategy for DFT with batch"):
        smt.matrices_of(sm.DFT, T=3, batch=(2,))


@pytest.mark.parametrize("call, error, match", [
    (lambda: _draw(smt.diagonals(T=-1)), ValueError, "T must be a non-negative int"),
    (lambda: _draw(smt.diagonals(batch=5)), ValueError, "batch must be a tuple"),
    (lambda: _draw(smt.sss(kind="bogus")), ValueError, "kind must be"),
    (lambda: smt.tolerance(torch.int64), ValueError, "dtype must be one of"),
    (lambda: smt.matrices_of("OneSS", T=3), TypeError, "cls must be a class"),
    (lambda: _draw(smt.sss(T=3, N=-1)), ValueError, "N must be an int >= 1"),
    (lambda: _draw(smt.lowranks(T=3, r=-1)), ValueError, "r must be an int >= 0"),
    (lambda: _draw(smt.one_ss(T=3, dtype=torch.int64)), TypeError, "dtype must be a floating-point or complex"),
])
def test_testing_strategies_name_their_bad_arguments(call, error, match):
    """D108: torch's "negative dimension", "Value after * must be an iterable", ``KeyError``, an ``issubclass`` error
    (and, session 23, a negative ``N`` or ``r`` and an integer ``dtype``)."""
    with pytest.raises(error, match=match):
        call()


def test_sma_plan_and_tuning_check_their_arguments():
    """D109: ``sma_plan(tuning="cpu")`` raised ``AttributeError`` and ``tuning={}`` planned with the default; an integer
    ``dtype`` was planned; a ``Tuning`` with ``chunk=0`` divided by zero in a run."""
    shape = (1, 16, 2, 4)
    M = sm.OneSS.causal(16)
    for kw, error, match in ((dict(tuning="cpu"), TypeError, "tuning must be a Tuning"),
                             (dict(tuning={}), TypeError, "tuning must be a Tuning"),
                             (dict(dtype=torch.int64), TypeError, "dtype must be a floating"),
                             (dict(dtype="float32"), TypeError, "dtype must be a floating")):
        with pytest.raises(error, match=match):
            sm.sma_plan(shape, shape, shape, M, **kw)
    with pytest.raises(ValueError, match="chunk must be a positive int"):
        dataclasses.replace(tuning_for("cpu"), chunk=0)
    with pytest.raises(TypeError, match="time_blocks must be a bool"):
        dataclasses.replace(tuning_for("cpu"), time_blocks="yes")


def test_rules_are_grouped_by_operation():
    """D110: ``rules()`` was documented "in registration order"; it is grouped by operation, each group in that
    order (the docstring now says so)."""
    ops = [r.op for r in sm.rules()]
    assert ops == sorted(ops, key=["add", "matmul", "hadamard", "inv", "transpose"].index)
    assert "grouped by operation" in sm.rules.__doc__


def test_tolerance_takes_numpy_dtypes():
    """Session 23's audit: ``tolerance(numpy.float64)`` was refused; numpy dtypes name torch's."""
    import numpy as np

    assert smt.tolerance(np.float64) == smt.tolerance(torch.float64)
    assert smt.tolerance(np.dtype("complex64")) == smt.tolerance(torch.complex64)
