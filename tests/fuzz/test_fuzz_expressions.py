"""Random expressions over every structured class and operation, checked against dense float64 algebra.

Each test draws a length ``T`` in {0, 1, 2, 3, 17}, a batch shape that the operands broadcast to
(each operand its own), a dtype (float64, complex128, float32, complex64; single precision against
double-precision references at ``structmat.testing.tolerance``) and sometimes ``torch.inference_mode``,
then checks every result (``to_dense``, ``@`` from both sides with broadcast batches and zero columns,
``diagonal``, ``solve``) or that the operation raised a clear error (see ``fuzz_helpers``).
"""

import pytest
from expression_builder import BINARY, UNARY, apply_binary, apply_unary, check_node, expressions, leaves
from fuzz_helpers import CLASSES, DTYPES, FULL_BATCHES, LENGTHS, fuzz, maybe_inference, tolerate_known
from hypothesis import given
from hypothesis import strategies as st


def _setting(data):
    T = data.draw(st.sampled_from(LENGTHS), label="T")
    full = data.draw(st.sampled_from(FULL_BATCHES), label="batch")
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    inference = data.draw(st.booleans(), label="inference_mode")
    return T, full, dtype, inference


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@fuzz(12)
@given(data=st.data())
def test_each_class_matches_dense(cls, data):
    T, full, dtype, inference = _setting(data)
    with tolerate_known(), maybe_inference(inference):
        node = data.draw(leaves(T, full, dtype, (cls,)), label="M")
        check_node(data.draw, node)


@pytest.mark.parametrize("op", UNARY)
@fuzz(12)
@given(data=st.data())
def test_unary_operations(op, data):
    T, full, dtype, inference = _setting(data)
    with tolerate_known(), maybe_inference(inference):
        a = data.draw(leaves(T, full, dtype), label="M")
        node = apply_unary(data.draw, op, a)
        check_node(data.draw, node)


@pytest.mark.parametrize("op", BINARY)
@fuzz(20)
@given(data=st.data())
def test_binary_operations(op, data):
    T, full, dtype, inference = _setting(data)
    with tolerate_known(), maybe_inference(inference):
        a = data.draw(leaves(T, full, dtype), label="A")
        b = data.draw(leaves(T, full, data.draw(st.sampled_from([dtype, dtype, *DTYPES]), label="dtype of B")), label="B")
        node = apply_binary(op, a, b)
        check_node(data.draw, node)


@fuzz(40)
@given(data=st.data())
def test_random_expressions(data):
    T, full, dtype, inference = _setting(data)
    with tolerate_known(), maybe_inference(inference):
        node = data.draw(expressions(T, full, dtype, depth=3), label="expression")
        check_node(data.draw, node)
