"""Each registry op's ONNX form: ``attach`` sets ``OpDef.onnx`` where a declaration
left it unset, ``support`` reports it.

An op's form is its lowering (declared with it: ``register(..., onnx=...)``, or, for
an elementwise op that declares none, its scalar expression), ``DECOMPOSED`` for a
composite (it exports as the ops it is made of: the capture records them), or the
reason it cannot export (``REASONS``).
"""
from ..ops.onnx_forms import lower_expression
from ..ops_registry import DECOMPOSED, list_ops

__all__ = ["support", "attach", "REASONS", "RANDOM", "NO_ONNX"]

RANDOM = "random: a draw from the generator has no ONNX equivalent that reproduces it"
NO_ONNX = "no ONNX operator or decomposition computes it"
_LINALG = "a matrix factorization or solve: ONNX has no operator for it"
_GRADIENT = "a gradient kernel with no ONNX operator"
_DATA_SHAPE = "its output's size depends on the values (no static shape to give it)"

REASONS = {
    # random draws
    "rand": RANDOM, "randn": RANDOM, "randint": RANDOM, "rand_like": RANDOM,
    "randn_like": RANDOM, "randperm": RANDOM, "normal": RANDOM, "randint_like": RANDOM,
    "bernoulli": RANDOM, "multinomial": RANDOM, "poisson": RANDOM, "_standard_gamma": RANDOM,
    "rrelu": RANDOM + " (in training mode; exports in eval mode)",
    "dropout": RANDOM + " (in training mode; in eval mode the identity, which exports)",
    "dropout1d": RANDOM + " (in training mode; exports in eval mode)",
    "dropout2d": RANDOM + " (in training mode; exports in eval mode)",
    "dropout3d": RANDOM + " (in training mode; exports in eval mode)",
    "alpha_dropout": RANDOM + " (in training mode; exports in eval mode)",
    "feature_alpha_dropout": RANDOM + " (in training mode; exports in eval mode)",
    "svd_lowrank": RANDOM + " (random projections)",
    "pca_lowrank": RANDOM + " (random projections)",
    "fractional_max_pool2d": RANDOM + " (random pooling regions)",
    "fractional_max_pool3d": RANDOM + " (random pooling regions)",
    # special functions
    "lgamma": NO_ONNX, "digamma": NO_ONNX, "polygamma": NO_ONNX, "erfinv": NO_ONNX,
    "i0": NO_ONNX, "special_i1": NO_ONNX, "igamma": NO_ONNX, "igammac": NO_ONNX,
    "_standard_gamma_grad": NO_ONNX, "frexp": NO_ONNX + " (the float's exponent bits)",
    "nextafter": NO_ONNX + " (the next float: bit arithmetic)",
    "gcd": NO_ONNX + " (a Euclid loop)", "lcm": NO_ONNX + " (a Euclid loop)",
    "bitwise_left_shift": NO_ONNX + " (BitShift is for unsigned integers)",
    "bitwise_right_shift": NO_ONNX + " (BitShift is for unsigned integers)",
    # linear algebra without an ONNX operator
    "linalg_inv": _LINALG, "linalg_solve": _LINALG, "linalg_solve_triangular": _LINALG,
    "linalg_cholesky": _LINALG, "linalg_qr": _LINALG, "linalg_svd": _LINALG,
    "linalg_lu_factor": _LINALG, "geqrf": _LINALG, "linalg_eigh": _LINALG,
    "_lu_pivots_to_permutation": _LINALG,
    # gradient kernels
    "conv2d_weight_grad": _GRADIENT, "avg_pool2d_input_grad": _GRADIENT,
    "index_onehot": _GRADIENT,
    # outputs sized by the values
    "bincount": _DATA_SHAPE, "unique_consecutive": _DATA_SHAPE,
    "histc": NO_ONNX + " (a histogram)", "histogram": NO_ONNX + " (a histogram)",
    "histogramdd": NO_ONNX + " (a histogram)",
    "cummax": NO_ONNX + " (a running maximum with its indices)",
    "cummin": NO_ONNX + " (a running minimum with its indices)",
    "_mode_index": NO_ONNX + " (the mode's index)",
    "empty": "its values are whatever memory held: no constant to record",
    "empty_like": "its values are whatever memory held: no constant to record",
    # composites made of ops without an ONNX form
    "inverse": "made of linalg_inv: " + _LINALG,
    "matrix_power": "a negative power is made of linalg_inv: " + _LINALG,
    "matrix_exp": "its number of squarings depends on the values",
    "cholesky": "made of linalg_cholesky: " + _LINALG,
    "cholesky_inverse": "made of linalg_inv: " + _LINALG,
    "cholesky_solve": "made of linalg_solve: " + _LINALG,
    "triangular_solve": "made of linalg_solve_triangular: " + _LINALG,
    "qr": "made of linalg_qr: " + _LINALG, "svd": "made of linalg_svd: " + _LINALG,
    "linalg_svdvals": "made of linalg_svd: " + _LINALG,
    "linalg_pinv": "made of linalg_svd: " + _LINALG,
    "pinverse": "made of linalg_svd: " + _LINALG,
    "lu": "made of linalg_lu_factor: " + _LINALG,
    "lu_unpack": "made of _lu_pivots_to_permutation: " + _LINALG,
    "lu_solve": "made of _lu_pivots_to_permutation: " + _LINALG,
    "linalg_lu_solve": "made of _lu_pivots_to_permutation: " + _LINALG,
    "linalg_lu": "made of linalg_lu_factor: " + _LINALG,
    "linalg_householder_product": "made of linalg_solve_triangular: " + _LINALG,
    "orgqr": "made of linalg_solve_triangular: " + _LINALG,
    "ormqr": "made of linalg_solve_triangular: " + _LINALG,
    "lobpcg": "made of linalg_eigh: " + _LINALG,
    "linalg_eigvalsh": "made of linalg_eigh: " + _LINALG,
    "mvlgamma": "made of lgamma: " + NO_ONNX,
    "mode": "made of _mode_index: " + NO_ONNX,
}


def attach():
    """Set ``onnx`` on every registry op whose declaration did not."""
    for op in list_ops():
        if op.onnx is not None:
            continue
        if op.name in REASONS:
            op.onnx = REASONS[op.name]
        elif op.composite is not None:
            op.onnx = DECOMPOSED
        elif op.expr or getattr(op, "fusion", None) is not None:
            op.onnx = lower_expression


def support():
    """``{op name: "lowered" | "decomposed" | the reason it cannot export}`` over every
    registry op (an op that declares nothing: ``"no ONNX form declared"``)."""
    attach()
    out = {}
    for op in list_ops():
        f = op.onnx
        if callable(f):
            out[op.name] = "lowered"
        elif f == DECOMPOSED:
            out[op.name] = "decomposed"
        else:
            out[op.name] = f or "no ONNX form declared"
    return out
