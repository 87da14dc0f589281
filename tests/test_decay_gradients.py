"""Gradients with respect to decays at exactly ``a_t = 0`` (issue 11), for every decay parameter a user can hold,
through every path, after transforms and closure operations, under ``skip_finite_checks()`` and ``torch.compile``.

The reference is the dense mask built entry by entry as products of decays (polynomials in ``a``, no logarithm),
differentiated by autograd: exact at 0. Log space loses ``d/da_t`` there (``exp(log a)`` has no slope at ``-inf``).
"""

import pytest
import torch
from conftest import F64, close, rand, randn

import structmat as sm

T, H, B = 7, 2, 2
J = torch.eye(T, dtype=F64).flip(0)
EYE = torch.eye(T, dtype=F64)


def products(a):
    """``L[..., j, i] = a_{i+1} ... a_j`` for ``j >= i``, 0 above, from ``a (*, T)``: entry by entry."""
    n = a.shape[-1]
    zero = a.new_zeros(a.shape[:-1])
    return torch.stack([torch.stack([a[..., i + 1:j + 1].prod(-1) if j >= i else zero for i in range(n)], -1)
                        for j in range(n)], -2)


def _decays(seed):
    a = 0.05 + 0.9 * rand(H, T, seed=seed)
    a[0, [0, 3]], a[1, [1, 6]] = 0.0, 0.0  # a zero decay at the first and last steps and inside
    return a


C = 2 + randn(H, T, seed=9)
KINDS = {  # name: (the parameter, the structured mask, the dense reference)
    "from_decays": (_decays(1), lambda a: sm.OneSS.from_decays(a, c=C), lambda a: C[..., None] * products(a)),
    "decay": (torch.tensor([0.0, 0.6], dtype=F64), lambda g: sm.OneSS.decay(g, T),
              lambda g: products(g[:, None].expand(H, T))),
    "lion": (_decays(2), lambda a: sm.Quasiseparable.lion(a, c=C),
             lambda a: C[..., None] * (products(a) + products(a).mT - EYE)),
    "lion_decay": (torch.tensor([0.0, 0.6], dtype=F64), lambda g: sm.Quasiseparable.lion_decay(g, T),
                   lambda g: (lambda L: L + L.mT - EYE)(products(g[:, None].expand(H, T)))),
    "bidirectional": (torch.stack([_decays(3), _decays(4).flip(-1)]),
                      lambda a: sm.Quasiseparable.bidirectional(sm.OneSS.from_decays(a[0]), sm.OneSS.from_decays(a[1])),
                      lambda a: products(a[0]).tril(-1) + (J @ products(a[1]) @ J).triu(1) + EYE),
}

OTHER, D = 0.2 + 0.5 * rand(H, T, seed=5), 1.5 + rand(T, seed=6)
TRANSFORMS = {  # name: (structured, dense)
    "none": (lambda M: M, lambda M: M),
    "T": (lambda M: M.T, lambda M: M.mT),
    "scale": (lambda M: M * 2.5, lambda M: M * 2.5),
    "to": (lambda M: M.to(F64), lambda M: M),
    "plus_diagonal": (lambda M: M + sm.Diagonal(D), lambda M: M + torch.diag(D)),
    "diagonal_matmul": (lambda M: sm.Diagonal(D) @ M, lambda M: torch.diag(D) @ M),
    "plus_oness": (lambda M: M + sm.OneSS.from_decays(OTHER), lambda M: M + products(OTHER)),
    "matmul_oness": (lambda M: M @ sm.OneSS.from_decays(OTHER), lambda M: M @ products(OTHER)),
    "hadamard": (lambda M: M.hadamard(sm.OneSS.from_decays(OTHER)), lambda M: M * products(OTHER)),
    "inv_inv": (lambda M: M.inv().inv(), lambda M: M),
}

X = randn(H, T, 3, seed=7)
q, k, v = randn(B, T, H, 2, seed=10), randn(B, T, 1, 2, seed=11), randn(B, T, H, 3, seed=12)  # grouped keys
PATHS = {  # name: (structured, dense)
    "matvec": (lambda M: M @ X, lambda L: L @ X),
    "to_dense": (lambda M: M.to_dense(), lambda L: L),
    "solve": (lambda M: M.solve(X), lambda L: torch.linalg.solve(L, X)),
    "inv": (lambda M: M.inv() @ X, lambda L: torch.linalg.solve(L, X)),
    **{order: ((lambda M, order=order: sm.sma(q, k, v, M, order=order, chunk=3)),
               lambda L: torch.einsum("hts,bthn,bsn,bshp->bthp", L, q, k[:, :, 0], v))
       for order in ("quadratic", "linear", "chunked")},
}


def _gradients(kind, transform, paths, run=lambda f, p: f(p)):
    """``(got, want)`` gradients of every path's output (against fixed weights) with respect to the parameter."""
    p0, build, dense = KINDS[kind]
    structured, dense_transform = TRANSFORMS[transform]

    def outputs(p, exact):
        M = dense_transform(dense(p)) if exact else structured(build(p))
        return [(PATHS[name][1] if exact else PATHS[name][0])(M) for name in paths]

    pairs = []
    for exact in (False, True):
        p = p0.clone().requires_grad_()
        ys = outputs(p, exact) if exact else run(lambda p: outputs(p, exact), p)
        weights = [randn(*y.shape, seed=20 + i) for i, y in enumerate(ys)]
        pairs.append((ys, torch.autograd.grad(sum((y * w).sum() for y, w in zip(ys, weights)), p)[0]))
    (ys, got), (want_ys, want) = pairs
    for y, w in zip(ys, want_ys):
        close(y, w)
    return got, want


@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_decay_gradient_at_zero_through_every_path(kind, transform):
    """Every path at once (a weighted sum of their outputs), then each path alone where the sum passes by luck."""
    got, want = _gradients(kind, transform, list(PATHS))
    zero = KINDS[kind][0] == 0
    assert (want[zero] != 0).any()  # the derivative at the zero decays is not 0
    close(got, want)


@pytest.mark.parametrize("kind", list(KINDS))
def test_no_host_read_decides_the_gradient(kind):
    """Under ``skip_finite_checks()`` nothing reads the decays on the host, and the gradient stays exact."""

    def run(f, p):
        with sm.skip_finite_checks():
            return f(p)

    for transform in ("none", "T"):
        got, want = _gradients(kind, transform, list(PATHS), run)
        close(got, want)


def test_compiled_gradient_at_zero():
    """``torch.compile(fullgraph=False)`` on the CPU: the paths it traces (sma, to_dense) and the one it runs
    eagerly after a graph break (the matvec's compiled CPU scan) give the exact derivative at 0."""
    torch._dynamo.reset()
    got, want = _gradients("from_decays", "none", ["chunked", "to_dense", "matvec"],
                           lambda f, p: torch.compile(f, fullgraph=False, backend="aot_eager")(p))
    close(got, want)


def test_sma_with_decays_compiles_to_one_graph():
    """``fullgraph=True``: the chunked order's decay gradient needs no host read, so nothing breaks the graph
    (``gamma = 0`` in one head: its derivative is the first-subdiagonal terms)."""
    torch._dynamo.reset()
    gamma = KINDS["decay"][0].clone().requires_grad_()
    f = lambda g: sm.sma(q, k, v, sm.OneSS.decay(g, T), order="chunked", chunk=3).square().sum()  # noqa: E731
    got = torch.autograd.grad(torch.compile(f, fullgraph=True, backend="aot_eager")(gamma), gamma)[0]
    dense = lambda g: torch.einsum("hts,bthn,bsn,bshp->bthp", products(g[:, None].expand(H, T)), q, k[:, :, 0], v)  # noqa: E731
    want = torch.autograd.grad(dense(gamma).square().sum(), gamma)[0]
    close(got, want)
    assert want[0] != 0


def test_gamma_derivative_at_zero_is_the_first_subdiagonal():
    """The brief's example: ``d/dgamma`` of ``OneSS.decay(gamma, T)`` at ``gamma = 0`` is 1 on the first
    subdiagonal (``d gamma^n / d gamma = n gamma^(n-1)``), 0 elsewhere; it was 0 everywhere."""
    gamma = torch.tensor(0.0, dtype=F64, requires_grad=True)
    W = randn(T, T, seed=30)
    (g,) = torch.autograd.grad((sm.OneSS.decay(gamma, T).to_dense() * W).sum(), gamma)
    close(g, W.diagonal(-1).sum())
    eps = 1e-7  # a float64 forward difference from a tiny positive decay agrees
    fd = ((sm.OneSS.decay(eps, T, dtype=F64).to_dense() * W).sum() - (EYE * W).sum()) / eps
    assert abs(g - fd) < 1e-5 * abs(fd)


def test_second_derivatives_through_the_generic_paths_are_exact():
    """Closure results run the generic scans, differentiated by autograd through the decays they carry: a
    Hessian-vector product at ``a_t = 0`` matches the dense products' (the matvec, ``to_dense``, sma's linear order)."""
    a0 = KINDS["from_decays"][0]
    paths = [(lambda M: M @ X, lambda L: L @ X), (lambda M: M.to_dense(), lambda L: L),
             (lambda M: sm.sma(q, k, v, M, order="linear"), PATHS["linear"][1])]
    for structured, dense in paths:
        hvps = []
        for f in (lambda a: structured(sm.OneSS.from_decays(a) + sm.Diagonal(D)),
                  lambda a: dense(products(a) + torch.diag(D))):
            a = a0.clone().requires_grad_()
            (g,) = torch.autograd.grad(f(a).square().sum(), a, create_graph=True)
            hvps.append(torch.autograd.grad(g.sum(), a)[0])
        close(*hvps)


LOSSES = {  # a loss of the output y and the decays a: squared (its incoming gradient depends on a), and linear in y
    # plus a term of a alone (the incoming gradient is constant: torch's once_differentiable guard never fires there)
    "squared": lambda y, a: y.square().sum(),
    "linear": lambda y, a: (y * randn(*y.shape, seed=40)).sum() + a.pow(3).sum(),
}


def _hessian_vector_products(structured, dense, loss, a0):
    """Hessian-vector products (the vector of ones) of ``loss(path(M(a)), a)`` for the structured path and the dense
    reference."""
    hvps = []
    for f in (structured, dense):
        a = a0.clone().requires_grad_()
        (g,) = torch.autograd.grad(loss(f(a), a), a, create_graph=True)
        hvps.append(torch.autograd.grad(g.sum(), a)[0])
    return hvps


@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.parametrize("kept", [True, False])
def test_second_derivatives_through_the_first_order_scans_are_exact(loss, kept, monkeypatch):
    """The matvec and ``to_dense`` of a ``OneSS`` and of an SSS of its decays (``+ Diagonal``) take the decays'
    gradient from hand-written backward passes; where the backward is differentiated it records its transposed
    scan, so second derivatives are exact, at ``a_t = 0`` too. Without a kept band (``kept=False``) the SSS
    multiplies through one first-order scan and a decay factor: its second derivative missed the scan's terms
    without a word before session 16 (errors of the size of the values)."""
    if not kept:
        import structmat.linalg.banded as banded

        monkeypatch.setattr(banded, "KEEP_MAX_ENTRIES", 0)
        monkeypatch.setattr(banded, "KEEP_PER_PARAMETER_BYTE", 0)
    a0 = KINDS["from_decays"][0]
    for path in ("matvec", "to_dense"):
        structured, dense = PATHS[path]
        for build, reference in ((sm.OneSS.from_decays, products),
                                 (lambda a: sm.OneSS.from_decays(a) + sm.Diagonal(D), lambda a: products(a) + torch.diag(D))):
            got, want = _hessian_vector_products(lambda a: structured(build(a)), lambda a: dense(reference(a)),
                                                 LOSSES[loss], a0)
            assert (want[..., 1:] != 0).all()  # (a_0 enters nothing)
            close(got, want)


@pytest.mark.parametrize("loss", list(LOSSES))
def test_second_derivatives_through_the_chunked_order_raise(loss):
    """The chunked order's decay gradient (a hand-written adjoint, not differentiable again) raises in a second
    derivative rather than missing its terms, also where the loss is linear in the output; the other orders give
    the exact second derivative."""
    a = KINDS["from_decays"][0].clone().requires_grad_()
    y = sm.sma(q, k, v, sm.OneSS.from_decays(a), order="chunked", chunk=3)
    (g,) = torch.autograd.grad(LOSSES[loss](y, a), a, create_graph=True)
    with pytest.raises(RuntimeError, match="not differentiable twice.*order='linear' or 'quadratic'"):
        torch.autograd.grad(g.sum(), a)
    for order in ("linear", "quadratic"):
        got, want = _hessian_vector_products(lambda a: PATHS[order][0](sm.OneSS.from_decays(a)),
                                             lambda a: PATHS[order][1](products(a)), LOSSES[loss], a)
        close(got, want)


def test_mixed_second_derivatives_through_the_chunked_order_raise():
    """``d/da`` of the gradient with respect to ``q`` (an input-gradient penalty while the decays train): the chunked
    order computes ``q``'s gradient with the decays held fixed, so it raises (it gave a wrong number without a word);
    the linear order gives the quadratic order's value, and with decays that want no gradient the chunked order's
    second derivative in ``q`` is exact."""
    def mixed(order, a_grad=True):
        a = KINDS["from_decays"][0].clone().requires_grad_(a_grad)
        qq = q.clone().requires_grad_()
        y = sm.sma(qq, k, v, sm.OneSS.from_decays(a), order=order, chunk=3)
        (gq,) = torch.autograd.grad(y.square().sum(), qq, create_graph=True)
        return torch.autograd.grad(gq.square().sum(), (a, qq) if a_grad else qq)

    with pytest.raises(RuntimeError, match="not differentiable twice.*order='linear' or 'quadratic'"):
        mixed("chunked")
    want = mixed("quadratic")
    assert want[0].abs().max() > 0
    for got, w in zip(mixed("linear"), want):
        close(got, w)
    close(mixed("chunked", a_grad=False)[0], mixed("quadratic", a_grad=False)[0])
