"""Valid calls for the bad-input sweep (``test_sweep_bad_input.py``) of the composites
declared with ``ops/_decl.decl`` and their registry-op neighbours (``ops/ufuncs.py``,
``reduce.py``, ``sorting.py``, ``joining.py``, ``linalg.py``...); the sweep builds its
bad cases from these."""


def extend(VALID, A, U, I, B, Raw, DT):  # noqa: E741 (the sweep's helper names)
    VALID.update({n: ((A(3, 4),), {}) for n in """asinh arcsinh deg2rad rad2deg erfc frac
        sgn sinc nan_to_num positive signbit isposinf isneginf isreal""".split()})
    VALID.update({n: ((A(3, 4), A(3, 4)), {}) for n in """copysign hypot logaddexp2 xlogy
        heaviside nextafter isclose fmax fmin""".split()})
    VALID.update({
        "acosh": ((U(3, 4) + 1,), {}), "arccosh": ((U(3, 4) + 1,), {}),
        "atanh": ((U(3, 4),), {}), "arctanh": ((U(3, 4),), {}), "logit": ((U(3, 4),), {}),
        "addcdiv": ((A(3, 4), A(3, 4), U(3, 4)), {"value": 0.5}),
        "addcmul": ((A(3, 4), A(3, 4), A(3, 4)), {"value": 0.5}),
        "float_power": ((U(3, 4), A(3, 4)), {}), "lerp": ((A(3, 4), A(3, 4), 0.3), {}),
        "ldexp": ((A(3, 4), I([[1, 2, 0, 3]])), {}),
        "gcd": ((I([[4, 6], [9, 12]]), I([[6, 4], [3, 8]])), {}),
        "lcm": ((I([[4, 6], [9, 12]]), I([[6, 4], [3, 8]])), {}),
        "bitwise_left_shift": ((I([[1, 2], [3, 4]]), I([[1, 0], [2, 3]])), {}),
        "bitwise_right_shift": ((I([[16, 2], [3, 40]]), I([[1, 0], [2, 3]])), {}),
        "isin": ((I([[1, 2], [3, 4]]), I([2, 3])), {}),
    })
    VALID.update({
        "aminmax": ((A(3, 4),), {"dim": 1}), "dist": ((A(3, 4), A(3, 4)), {}),
        "nansum": ((A(3, 4),), {"dim": 1}), "nanmean": ((A(3, 4),), {"dim": 1}),
        "median": ((A(3, 4),), {"dim": 1}), "nanmedian": ((A(3, 4),), {"dim": 1}),
        "kthvalue": ((A(3, 4), 2), {"dim": 1}), "msort": ((A(3, 4),), {}),
        "quantile": ((A(3, 4), 0.25), {"dim": 1}), "nanquantile": ((A(3, 4), 0.25), {"dim": 1}),
        "std_mean": ((A(3, 4),), {"dim": 1}), "var_mean": ((A(3, 4),), {"dim": 1}),
        "count_nonzero": ((A(3, 4),), {"dim": 1}), "logcumsumexp": ((A(3, 4), 1), {}),
    })
    VALID.update({n: ((A(3, 4),), {}) for n in "adjoint ravel".split()})
    VALID.update({
        "dsplit": ((A(2, 3, 4), 2), {}), "hsplit": ((A(3, 4), 2), {}),
        "vsplit": ((A(4, 3), 2), {}), "column_stack": (([A(3), A(3, 2)],), {}),
        "dstack": (([A(3, 4), A(3, 4)],), {}), "row_stack": (([A(4), A(2, 4)],), {}),
        "narrow_copy": ((A(3, 4), 1, 1, 2), {}), "select": ((A(3, 4), 1, 2), {}),
        "take": ((A(3, 4), I([0, 5, 11])), {}), "atleast_1d": ((A(),), {}),
        "atleast_2d": ((A(4),), {}), "atleast_3d": ((A(3, 4),), {}),
        "block_diag": ((A(2, 3), A(3)), {}), "broadcast_tensors": ((A(3, 1), A(4)), {}),
        "cartesian_prod": ((A(3), A(2)), {}), "cdist": ((A(3, 4), A(5, 4)), {}),
        "combinations": ((A(4),), {}), "corrcoef": ((A(3, 5),), {}), "cov": ((A(3, 5),), {}),
        "cross": ((A(4, 3), A(4, 3)), {"dim": 1}), "diagflat": ((A(3),), {}),
        "diff": ((A(3, 4),), {"dim": 1}), "kron": ((A(2, 3), A(3, 2)), {}),
        "rot90": ((A(3, 4),), {"k": 1, "dims": (0, 1)}),
        "meshgrid": ((A(3), A(4)), {"indexing": "ij"}),
        "renorm": ((A(3, 4), 2, 0, 1.0), {}), "vander": ((A(4),), {}),
        "trapezoid": ((A(3, 5),), {}), "trapz": ((A(3, 5),), {}),
        "cumulative_trapezoid": ((A(3, 5),), {}),
        "select_scatter": ((A(3, 4), A(3), 1, 0), {}),
        "slice_scatter": ((A(3, 4), A(3, 2), 1, 0, 2), {}),
        "diagonal_scatter": ((A(4, 4), A(4)), {}),
        "index_add": ((A(4, 3), 0, I([0, 2]), A(2, 3)), {}),
        "index_copy": ((A(4, 3), 0, I([3, 1]), A(2, 3)), {}),
        "index_fill": ((A(4, 3), 0, I([3, 1]), -1.5), {}),
        "unravel_index": ((I([5, 7, 0]), (3, 4)), {}),
        "bincount": ((I([0, 1, 1, 3]),), {}), "histc": ((A(20),), {"bins": 4, "min": -2, "max": 2}),
        "bucketize": ((A(3, 4), A(3) * 0 + [-1.0, 0.0, 1.0]), {}),
        "searchsorted": ((A(3) * 0 + [-1.0, 0.0, 1.0], A(3, 4)), {}),
        "histogram": ((A(20),), {"bins": 4}),
    })
    VALID.update({
        "addmm": ((A(3, 5), A(3, 4), A(4, 5)), {}), "addmv": ((A(3), A(3, 4), A(4)), {}),
        "addr": ((A(3, 4), A(3), A(4)), {}), "addbmm": ((A(3, 5), A(2, 3, 4), A(2, 4, 5)), {}),
        "baddbmm": ((A(2, 3, 5), A(2, 3, 4), A(2, 4, 5)), {}),
        "bmm": ((A(2, 3, 4), A(2, 4, 5)), {}),
        "mv": ((A(3, 4), A(4)), {}), "inner": ((A(3, 4), A(2, 4)), {}), "vdot": ((A(4), A(4)), {}),
        "chain_matmul": ((A(3, 4), A(4, 2)), {}), "matrix_power": ((A(3, 3), 2), {}),
        "matrix_exp": ((A(3, 3),), {}), "logdet": ((A(3, 3) + 3 * I(np_eye(3)),), {}),
        "cholesky": ((A(3, 3) @ A(3, 3).T + 3 * I(np_eye(3)),), {}),
        "cholesky_inverse": ((U(3, 3) * I(np_tril(3)) + I(np_eye(3)),), {}),
        "cholesky_solve": ((A(3, 2), U(3, 3) * I(np_tril(3)) + I(np_eye(3))), {}),
        "triangular_solve": ((A(3, 2), U(3, 3) * I(np_tril(3)).T + I(np_eye(3))), {}),
        "range": ((0, 4), {}), "logspace": ((0, 2, 3), {}),
    })
    VALID.update({  # scatter_reduce, index_reduce, cummax, mode...
        "scatter_reduce": ((A(3, 4), 1, I([[0, 1, 1], [2, 3, 0], [1, 1, 1]]), A(3, 3), "amax"),
                           {}),
        "index_reduce": ((A(4, 3), 0, I([0, 2]), A(2, 3), "prod"), {}),
        "cummax": ((A(3, 4), 1), {}), "cummin": ((A(3, 4), 1), {}),
        "mode": ((A(3, 4),), {"dim": 1}),
        "unique_consecutive": ((I([1, 1, 2, 2, 3, 1]),), {}),
    })
    VALID.update({  # ops/random.py (compared by shape: RANDOM)
        "bernoulli": ((U(3, 4),), {}), "multinomial": ((U(5), 3), {}),
        "normal": ((A(3, 4), U(3, 4)), {}), "poisson": ((U(3, 4),), {}),
        "randint_like": ((A(3, 4), 5), {}),
    })


def extend_special(VALID, A, U, I):  # noqa: E741
    VALID.update({  # ops/special.py, ufuncs.py (frexp), reduce.py (gradient)
        "erfinv": ((U(3, 4),), {}), "mvlgamma": ((U(3, 4) + 2, 2), {}),
        "frexp": ((A(3, 4),), {}), "gradient": ((A(3, 4),), {"spacing": 0.5}),
        "i0": ((A(3, 4),), {}), "igamma": ((U(3, 4) + 1, U(3, 4)), {}),
        "igammac": ((U(3, 4) + 1, U(3, 4)), {}),
    })
    VALID.update({  # ops/linalg_decomp.py (svd: its factors' signs vary)
        "qr": ((A(4, 3),), {}), "pinverse": ((A(4, 3),), {}),
        "lu": ((A(3, 3) + 3 * I(np_eye(3)),), {}),
        "lu_unpack": ((A(3, 3), I([2, 3, 3]).astype("int32")), {}),
        "lu_solve": ((A(3, 2), A(3, 3) + 3 * I(np_eye(3)), I([1, 2, 3]).astype("int32")), {}),
    })
    VALID.update({  # low-rank, Householder, eigh; histogramdd, segment_reduce
        "geqrf": ((A(4, 3),), {}), "orgqr": ((A(4, 3), A(3)), {}),
        "ormqr": ((A(4, 3), A(3), A(4, 2)), {}),
        "svd_lowrank": ((A(5, 4),), {"q": 2}), "pca_lowrank": ((A(5, 4),), {"q": 2}),
        "lobpcg": ((A(6, 6),), {"k": 1}), "histogramdd": ((A(5, 2),), {"bins": 3}),
        "segment_reduce": ((A(6), "sum"), {"lengths": I([2, 4])}),
    })


RANDOM = {"bernoulli", "multinomial", "normal", "poisson", "randint_like",
          # random starting directions in PyTorch (and lobpcg's answer is its iteration's)
          "svd_lowrank", "pca_lowrank", "lobpcg"}


def np_eye(n):
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def np_tril(n):
    return [[1 if j <= i else 0 for j in range(n)] for i in range(n)]
