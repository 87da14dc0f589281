/* The product of two quasiseparable matrices whose four sides are 1-SS decays, one pass per row.

   The formulas are those of structmat/algebra/quasiseparable_decay.py (its module docstring): the pair states
   z = F (b1l b2u) and v = G^T (c1u c2l), then every generator of the product at a step from the operands' values
   at that step. In numpy the same product takes some forty array operations and two LAPACK calls, each of which
   costs more than the arithmetic of a T = 16 matrix; here it is one call. Real float32 and float64 only; the
   recurrences run in double, as the numpy path's LAPACK solves do. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

/* The inputs in this order, each (R, T) by a pointer and two strides in elements (row, step). */
enum { L1, M1, L2, M2, B1L, C1L, B1U, C1U, B2L, C2L, B2U, C2U, D1, D2, N_IN };
/* The outputs in this order, each contiguous: lower and upper A (R, T, 2, 2), B and C (R, T, 2) of each part, then the
   diagonal (R, T). */
enum { AL, AU, BL, BU, CL, CU, DG, N_OUT };

/* An input: its address and its strides in elements (between rows, between steps). */
typedef struct {
    const char *data;
    Py_ssize_t row, step;
} Input;

/* The value of input ``x`` at step ``i`` of the row at ``base`` (an element offset), widened to double. */
static inline double load(const Input *x, Py_ssize_t base, Py_ssize_t i, int single) {
    const Py_ssize_t at = base + i * x->step;
    return single ? (double)((const float *)x->data)[at] : ((const double *)x->data)[at];
}

static inline void store(void *out, Py_ssize_t at, double value, int single) {
    if (single)
        ((float *)out)[at] = (float)value;
    else
        ((double *)out)[at] = value;
}

/* Every row's generators; ``v`` a scratch of T doubles (the backward pair state of the row). */
static void product(Py_ssize_t R, Py_ssize_t T, const Input *in, void *const *out, double *v, int single) {
    for (Py_ssize_t r = 0; r < R; ++r) {
        Py_ssize_t base[N_IN];
        for (int k = 0; k < N_IN; ++k) base[k] = r * in[k].row;
#define X(k, i) load(&in[k], base[k], (i), single)
        /* v_k = g_{k+1} (v_{k+1} + c1u_{k+1} c2l_{k+1}), g = a2l a1u: each state read one step off its recurrence,
           never as a difference (which cancels under strong decays) */
        if (T > 0) v[T - 1] = 0.0;
        for (Py_ssize_t k = T - 2; k >= 0; --k)
            v[k] = exp(X(L2, k + 1) + X(M1, k + 1)) * (v[k + 1] + X(C1U, k + 1) * X(C2L, k + 1));
        /* z_i = f_i (z_{i-1} + b1l_{i-1} b2u_{i-1}), f = a1l a2u */
        double z = 0.0, u = 0.0;
        for (Py_ssize_t i = 0; i < T; ++i) {
            const double l1 = X(L1, i), m1 = X(M1, i), l2 = X(L2, i), m2 = X(M2, i);
            const double b1l = X(B1L, i), c1l = X(C1L, i), b1u = X(B1U, i), c1u = X(C1U, i);
            const double b2l = X(B2L, i), c2l = X(C2L, i), b2u = X(B2U, i), c2u = X(C2U, i);
            const double d1 = X(D1, i), d2 = X(D2, i);
            if (i > 0) z = exp(l1 + m2) * (z + u);
            u = b1l * b2u;
            const double a1l = exp(l1), a1u = exp(m1), a2l = exp(l2), a2u = exp(m2);
            const Py_ssize_t t = r * T + i;
            const double A[2][4] = {{a1l, a2l * b1l * c2l, 0.0, a2l}, {a2u, a1u * b2u * c1u, 0.0, a1u}};
            for (int e = 0; e < 4; ++e) store(out[AL], 4 * t + e, A[0][e], single), store(out[AU], 4 * t + e, A[1][e], single);
            store(out[BL], 2 * t, b1l * d2 + c2u * z, single), store(out[BL], 2 * t + 1, b2l, single);
            store(out[BU], 2 * t, b2u * d1 + c1l * z, single), store(out[BU], 2 * t + 1, b1u, single);
            store(out[CL], 2 * t, c1l, single), store(out[CL], 2 * t + 1, (d1 - c1l * b1l) * c2l + b1u * v[i], single);
            store(out[CU], 2 * t, c2u, single), store(out[CU], 2 * t + 1, (d2 - c2u * b2u) * c1u + b2l * v[i], single);
            store(out[DG], t, d1 * d2 + c1l * c2u * z + b1u * b2l * v[i], single);
        }
#undef X
    }
}

/* decay_product(itemsize, R, T, *outputs, *inputs): every output an integer address, every input three integers
   (address, row stride, step stride). The caller (quasiseparable_decay_compiled.py) checks the dtypes, devices and
   sizes: this function trusts them. */
static PyObject *decay_product(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    enum { N_ARGS = 3 + N_OUT + 3 * N_IN };
    if (nargs != N_ARGS) {
        PyErr_Format(PyExc_TypeError, "decay_product takes %d arguments, got %zd", N_ARGS, nargs);
        return NULL;
    }
    const long itemsize = PyLong_AsLong(args[0]);
    const Py_ssize_t R = PyLong_AsSsize_t(args[1]), T = PyLong_AsSsize_t(args[2]);
    void *out[N_OUT];
    for (int k = 0; k < N_OUT; ++k) out[k] = PyLong_AsVoidPtr(args[3 + k]);
    Input in[N_IN];
    for (int k = 0; k < N_IN; ++k) {
        PyObject *const *a = args + 3 + N_OUT + 3 * k;
        in[k].data = PyLong_AsVoidPtr(a[0]);
        in[k].row = PyLong_AsSsize_t(a[1]);
        in[k].step = PyLong_AsSsize_t(a[2]);
    }
    if (PyErr_Occurred()) return NULL;
    if ((itemsize != 4 && itemsize != 8) || R < 0 || T < 0) {
        PyErr_SetString(PyExc_ValueError, "decay_product: itemsize 4 or 8, R >= 0 and T >= 0");
        return NULL;
    }
    double *v = PyMem_Malloc((T > 0 ? T : 1) * sizeof(double));
    if (v == NULL) return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS  /* (a batch of long rows runs for milliseconds) */
    product(R, T, in, out, v, itemsize == 4);
    Py_END_ALLOW_THREADS
    PyMem_Free(v);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decay_product", (PyCFunction)(void (*)(void))decay_product, METH_FASTCALL,
     "The generators of the product of two quasiseparable matrices with 1-SS decay sides (trusted addresses)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT, .m_name = "_quasiseparable_decay", .m_size = -1, .m_methods = methods};

PyMODINIT_FUNC PyInit__quasiseparable_decay(void) { return PyModule_Create(&module); }
