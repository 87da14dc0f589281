"""``structmat.nn.SMA`` (every mask: decoding reproduces the forward, gradients, custom masks) and
``structmat.nn.Hydra`` (against the dense quasiseparable matrix its parameters define)."""

import pytest
import torch
import torch.nn.functional as F
from conftest import F64, rel

import structmat as sm
from structmat.nn import MASKS, SMA, Hydra


@pytest.mark.parametrize("mask", MASKS)
def test_every_named_mask_runs_and_decodes_where_it_can(mask):
    torch.manual_seed(0)
    layer = SMA(16, 4, mask=mask, d_state=4, n_groups=2, max_seqlen=32, chunk_size=4).double()
    u = torch.randn(2, 11, 16, dtype=F64)
    y = layer(u)
    assert y.shape == u.shape and torch.isfinite(y).all()
    if mask in ("selective", "decay", "causal"):
        state, steps = None, []
        for t in range(11):
            out, state = layer.step(u[:, t : t + 1], state)
            steps.append(out)
        assert rel(torch.cat(steps, 1), y) < 1e-10
    else:
        with pytest.raises(TypeError, match="no bounded recurrent state"):
            layer.step(u[:, :1], None)
    causal = mask in ("selective", "decay", "causal", "toeplitz")
    changed = u.clone()
    changed[:, 7:] += 1.0
    later_changes_earlier = rel(layer(changed)[:, :7], y[:, :7]) > 1e-8
    assert later_changes_earlier != causal  # causal masks ignore the future, the others read it


def test_layers_match_their_definitions():
    """The selective layer is a Mamba-2 SSD; the normalised causal one is linear attention with a denominator."""
    torch.manual_seed(1)
    layer = SMA(8, 2, mask="selective", d_state=3, norm=False, gate=False).double()
    u = torch.randn(1, 9, 8, dtype=F64)
    v, k, q, _, dt = torch.split(layer.in_proj(u), layer.sizes, dim=-1)
    y = sm.ssd(v.unflatten(-1, (2, 4)), dt, layer._A(), k[:, :, None], q[:, :, None] / 3**0.5, 4, dt_bias=layer.dt_bias,
               dt_softplus=True)
    assert rel(layer(u), layer.out_proj(y.flatten(-2))) < 1e-12
    lin = SMA(8, 2, mask="causal", d_state=3, norm=False, gate=False).double()
    v, k, q, _, _ = torch.split(lin.in_proj(u), lin.sizes, dim=-1)
    q, k, v = F.elu(q) + 1, F.elu(k) + 1, v.unflatten(-1, (2, 4))
    scores = torch.tril(torch.einsum("tn,sn->ts", q[0], k[0]))
    want = torch.einsum("ts,shp->thp", scores, v[0]) / scores.sum(-1)[:, None, None]
    assert rel(lin(u)[0], lin.out_proj(want.flatten(-2))) < 1e-12


def test_custom_masks_from_the_algebra_and_gradients():
    torch.manual_seed(2)
    kernel = torch.nn.Parameter(torch.rand(7, dtype=F64))
    layer = SMA(8, 2, mask=lambda u: sm.OneSS.decay(0.9, u.shape[1], dtype=F64) + sm.Toeplitz.causal(kernel), d_state=3).double()
    u = torch.randn(2, 7, 8, dtype=F64, requires_grad=True)
    y = layer(u)
    y.square().sum().backward()
    assert kernel.grad is not None and torch.isfinite(kernel.grad).all() and kernel.grad.abs().sum() > 0
    small = SMA(4, 2, mask="selective", d_state=2, chunk_size=4).double()
    x = torch.randn(1, 5, 4, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: small(x), (x,))
    assert "mask='selective'" in repr(small)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="mask must be one of"):
        SMA(8, 2, mask="banded")
    with pytest.raises(ValueError, match="multiple of n_groups"):
        SMA(8, 3, n_groups=2)
    layer = SMA(8, 2, mask="toeplitz", max_seqlen=4)
    with pytest.raises(ValueError, match="max_seqlen=4"):
        layer(torch.randn(1, 5, 8))
    with pytest.raises(ValueError, match=r"u must have shape \(batch, seqlen, 8\)"):
        layer(torch.randn(1, 5, 7))


def _hydra_dense(mixer: Hydra, u: torch.Tensor) -> torch.Tensor:
    """Hydra's output from the dense quasiseparable matrix of every head, built from its parameters."""
    H, P, G, N = mixer.nheads, mixer.headdim, mixer.ngroups, mixer.d_state
    z, xBC, dt = torch.split(mixer.in_proj(u), [mixer.d_inner, mixer.d_inner + 4 * G * N, 2 * H], dim=-1)
    xBC = F.silu(F.conv1d(xBC.transpose(1, 2), mixer.conv1d.weight, mixer.conv1d.bias, padding=mixer.d_conv // 2,
                          groups=xBC.shape[-1]).transpose(1, 2))
    x, Bf, Cf, Bb, Cb = torch.split(xBC, [mixer.d_inner, G * N, G * N, G * N, G * N], dim=-1)
    d = F.softplus(dt + torch.cat([mixer.dt_bias, mixer.dt_bias]))
    A = -torch.exp(mixer.A_log)
    T = u.shape[1]
    ys = []
    for h in range(H):
        g = h // (H // G)
        sl = slice(g * N, (g + 1) * N)

        def one_ss(dh, Bm, Cm):  # L[t, s] = (C_t . B_s) exp(sum_{s<k<=t} dt_k A) dt_s
            return sm.OneSS(dh * A[h]).to_dense() * (Cm[:, :, sl] @ Bm[:, :, sl].transpose(1, 2)) * dh[:, None, :]

        Lf = one_ss(d[..., h], Bf, Cf)
        flip = lambda t: torch.flip(t, (1,))  # noqa: E731
        Lb = torch.flip(one_ss(flip(d[..., H + h]), flip(Bb), flip(Cb)), (1, 2))
        shift = torch.diag(torch.ones(T - 1, dtype=u.dtype), -1)
        M = shift @ Lf + (shift @ Lb.flip(1, 2)).flip(1, 2) + torch.diag_embed(mixer.fc_D(x)[..., h] + mixer.D[h])
        ys.append(M @ x[..., h * P : (h + 1) * P])
    return mixer.out_proj(mixer.norm(torch.cat(ys, -1), z))


def test_hydra_is_its_quasiseparable_matrix():
    torch.manual_seed(3)
    mixer = Hydra(d_model=8, d_state=3, headdim=4, ngroups=2, d_conv=3, chunk_size=4).double()
    with torch.no_grad():
        mixer.A_log.uniform_(-1, 1)
        mixer.D.uniform_(-1, 1)
    u = torch.randn(2, 9, 8, dtype=F64)
    assert rel(mixer(u), _hydra_dense(mixer, u)) < 1e-12
    parts = [torch.randn(1, n, 8, dtype=F64) for n in (4, 6)]  # packed sequences stay apart
    seq_idx = torch.tensor([[0] * 4 + [1] * 6])
    assert rel(mixer(torch.cat(parts, 1), seq_idx=seq_idx), torch.cat([mixer(p) for p in parts], 1)) < 1e-12
    assert "nheads=4" in repr(mixer)
