"""IR -> CUDA C for a CuPy ``ElementwiseKernel`` (which broadcasts its arguments).

Each IR node becomes one ``T tN = ...;`` line; CUDA's C++ math overloads (``exp``,
``tanh``, ``erf`` for float and double) give the dtype-specialised functions.
"""
import numpy as np

from .expr import topo

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=",
          "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||"}
_FN = {"exp": "exp", "log": "log", "log1p": "log1p", "expm1": "expm1", "sqrt": "sqrt",
       "tanh": "tanh", "sin": "sin", "cos": "cos", "abs": "fabs", "erf": "erf"}


def kernel_spec(inputs, outputs, dtype, name):
    """``(in_params, out_params, operation, name)`` for ``elementwise_kernel``."""
    ctype = "float" if np.dtype(dtype) == np.float32 else "double"
    names, lines = {}, []
    for k, node in enumerate(inputs):
        names[node] = f"a{k}"
    for n in topo(outputs):
        if n in names:
            continue
        if n.op == "const":
            names[n] = f"(({ctype}){_lit(n.value)})"
            continue
        if n.op == "var":
            raise ValueError(f"elementwise: free variable {n.value!r} is not an input")
        t = f"t{len(lines)}"
        a = [names[x] for x in n.args]
        typ = "bool" if n.is_bool else ctype
        lines.append(f"{typ} {t} = {_expr(n, a, ctype)};")
        names[n] = t
    for j, o in enumerate(outputs):
        lines.append(f"o{j} = ({ctype})({names[o]});")
    in_params = ", ".join(f"T a{k}" for k in range(len(inputs)))
    out_params = ", ".join(f"T o{j}" for j in range(len(outputs)))
    safe = "".join(c if c.isalnum() else "_" for c in name)
    return in_params, out_params, "\n".join(lines), f"tg_{safe}"


def _lit(v):
    if v != v:
        return "CUDART_NAN"
    if v in (float("inf"), float("-inf")):
        return "CUDART_INF" if v > 0 else "-CUDART_INF"
    return repr(v)


def _expr(n, a, ctype):
    op, one = n.op, f"(({ctype})1)"
    if op in _INFIX:
        return f"({a[0]} {_INFIX[op]} {a[1]})"
    if op == "neg":
        return f"(-{a[0]})"
    if op == "not":
        return f"(!{a[0]})"
    if op == "where":
        return f"({a[0]} ? {a[1]} : {a[2]})"
    if op == "maximum":
        return f"(({a[1]} != {a[1]}) ? {a[1]} : (!({a[0]} <= {a[1]}) ? {a[0]} : {a[1]}))"
    if op == "minimum":
        return f"(({a[1]} != {a[1]}) ? {a[1]} : (!({a[0]} >= {a[1]}) ? {a[0]} : {a[1]}))"
    if op == "sign":
        return f"(({a[0]} > 0) ? {one} : (({a[0]} < 0) ? -{one} : {a[0]}))"
    if op == "pow":
        return f"pow({a[0]}, {a[1]})"
    if op == "rsqrt":
        return f"({one} / sqrt({a[0]}))"
    if op == "sigmoid":
        return f"({one} / ({one} + exp(-{a[0]})))"
    if op == "softplus":  # max(x, 0) + log1p(exp(-|x|)): no overflow; NaN stays NaN
        return f"((({a[0]} > 0) ? {a[0]} : ({one} - {one})) + log1p(exp(-fabs({a[0]}))))"
    return f"{_FN[op]}({a[0]})"
