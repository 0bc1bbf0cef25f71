"""IR -> CUDA C for CuPy kernels. Pure string generation (no CuPy import), so the
sources are tested on machines without a GPU (``tests/fusion/test_codegen_cuda.py``).

Each IR node becomes one ``T tN = ...;`` line; math functions are CUDA's C ones
named for the dtype (``expf``/``exp``, ``tanhf``/``tanh``...), so no C++ overload is
relied on.
Infinite and NaN constants are spelled ``TG_INF``/``TG_NAN``, defined in ``PREAMBLE``
(every kernel carries it) from bit patterns: no CUDA header or ``CUDART_*`` macro is
needed, which NVRTC does not provide.

Three kinds of kernel:
- ``kernel_spec``: an elementwise op for ``cupy.ElementwiseKernel`` (it broadcasts);
- ``reduce_source``: the sum of an op's one output over all elements for
  ``cupy.RawKernel``, in one pass that writes nothing but one float64 partial sum
  per block (a grid-stride loop accumulating in float64 registers, then a
  shared-memory tree per block); the caller sums the few partials;
- ``update_spec``: an in-place optimizer update (``fusion.update.Update``) for
  ``cupy.ElementwiseKernel``: the assigned arrays are output parameters, read then
  written, one pass over each parameter.
"""
import numpy as np

from .expr import topo

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=",
          "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||"}
_FN = {"exp": "exp", "log": "log", "log1p": "log1p", "expm1": "expm1", "sqrt": "sqrt",
       "tanh": "tanh", "sin": "sin", "cos": "cos", "abs": "fabs", "erf": "erf", "exp2": "exp2",
       "log2": "log2", "log10": "log10"}

# bit patterns, as CuPy's own cupy/math_constants.h spells CUDART_INF/CUDART_NAN
PREAMBLE = ("#define TG_INF __longlong_as_double(0x7ff0000000000000ULL)\n"
            "#define TG_NAN __longlong_as_double(0x7ff8000000000000ULL)\n")
REDUCE_BLOCK = 256  # threads per block of the reduction (a power of two)


def ctype_of(dtype):
    return "float" if np.dtype(dtype) == np.float32 else "double"


def _body(inputs, outputs, ctype, names):
    """Statement lines computing ``outputs`` from ``names`` (node -> C name) of the
    inputs; returns (lines, C expression of each output cast to ``ctype``)."""
    names, lines = dict(names), []
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
    return lines, [f"({ctype})({names[o]})" for o in outputs]


def _safe(name):
    return "".join(c if c.isalnum() else "_" for c in name)


def kernel_spec(inputs, outputs, dtype, name):
    """``(in_params, out_params, operation, name, preamble)`` for
    ``devices.cuda.elementwise_kernel``."""
    ctype = ctype_of(dtype)
    lines, outs = _body(inputs, outputs, ctype, {node: f"a{k}" for k, node in enumerate(inputs)})
    lines += [f"o{j} = {o};" for j, o in enumerate(outs)]
    in_params = ", ".join(f"T a{k}" for k in range(len(inputs)))
    out_params = ", ".join(f"T o{j}" for j in range(len(outputs)))
    return in_params, out_params, "\n".join(lines), f"tg_{_safe(name)}", PREAMBLE


def reduce_source(inputs, output, dtype, pattern, name):
    """``(source, kernel name)``: ``kernel(p0, ..., partial, n)`` sums ``output`` over
    ``n`` elements in one pass into ``partial[blockIdx.x]`` (float64), launched with
    ``REDUCE_BLOCK`` threads per block. ``pattern[k]``: ``f`` for a flat contiguous
    input of ``n`` elements, ``s`` for a one-element input (read once)."""
    if len(pattern) != len(inputs):
        raise ValueError(f"{name}: pattern {pattern!r} for {len(inputs)} inputs")
    ctype = ctype_of(dtype)
    kname = f"tg_reduce_{_safe(name)}_{ctype}_{pattern}"
    params = [f"const {ctype}* __restrict__ p{k}" for k in range(len(inputs))]
    params += ["double* __restrict__ partial", "const long long n"]
    head = [f"const {ctype} s{k} = p{k}[0];" for k, c in enumerate(pattern) if c == "s"]
    loads = [f"const {ctype} a{k} = " + (f"p{k}[i];" if c == "f" else f"s{k};")
             for k, c in enumerate(pattern)]
    lines, (out,) = _body(inputs, [output], ctype,
                          {node: f"a{k}" for k, node in enumerate(inputs)})
    loop = loads + lines + [f"acc += (double){out};"]
    src = [PREAMBLE + 'extern "C" __global__',
           f"void {kname}({', '.join(params)}) {{",
           f"    __shared__ double sh[{REDUCE_BLOCK}];"]
    src += ["    " + h for h in head]
    src += ["    double acc = 0.0;",
            "    const long long stride = (long long)blockDim.x * gridDim.x;",
            "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; "
            "i < n; i += stride) {"]
    src += ["        " + x for x in loop]
    src += ["    }",
            "    sh[threadIdx.x] = acc;",
            "    __syncthreads();",
            f"    for (unsigned int s = {REDUCE_BLOCK // 2}; s > 0; s >>= 1) {{",
            "        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];",
            "        __syncthreads();",
            "    }",
            "    if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];",
            "}"]
    return "\n".join(src) + "\n", kname


def update_spec(in_nodes, scalar_nodes, targets, out_nodes, dtype, name):
    """``(in_params, out_params, operation, name, preamble)`` of an in-place update:
    ``in_nodes[k]`` is array ``a{k}`` (an output parameter when ``k in targets``,
    read before any write), ``scalar_nodes[k]`` scalar ``s{k}``; ``out_nodes[j]`` is
    the new value of array ``targets[j]``. Call with the arrays that are not targets,
    then the scalars (of ``dtype``), then the targets."""
    ctype = ctype_of(dtype)
    tname = np.dtype(dtype).name
    used = set(topo(out_nodes))
    names, loads = {}, []
    for k, node in enumerate(in_nodes):
        if node in used:  # each value read once, before the targets are written
            names[node] = f"x{k}"
            loads.append(f"const {ctype} x{k} = a{k};")
    for k, node in enumerate(scalar_nodes):
        names[node] = f"s{k}"
    lines, outs = _body([], out_nodes, ctype, names)
    stores = [f"a{k} = {o};" for k, o in zip(targets, outs)]
    ins = [f"{tname} a{k}" for k in range(len(in_nodes)) if k not in targets]
    ins += [f"{tname} s{k}" for k in range(len(scalar_nodes))]
    outp = [f"{tname} a{k}" for k in targets]
    return (", ".join(ins), ", ".join(outp), "\n".join(loads + lines + stores),
            f"tg_update_{_safe(name)}", PREAMBLE)


def _lit(v):
    if v != v:
        return "TG_NAN"
    if v in (float("inf"), float("-inf")):
        return "TG_INF" if v > 0 else "(-TG_INF)"
    return repr(float(v))


def _fn(name, ctype):
    """The C math function for ``ctype``: ``expf`` for float (explicit, not relying
    on C++ overloads being declared), ``exp`` for double."""
    return name + "f" if ctype == "float" else name


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
        return f"{_fn('pow', ctype)}({a[0]}, {a[1]})"
    if op == "rsqrt":
        return f"({one} / {_fn('sqrt', ctype)}({a[0]}))"
    if op == "logaddexp":  # as NumPy's: x + log 2 where x == y, equal infinities included
        return (f"(({a[0]} == {a[1]}) ? ({a[0]} + ({ctype})0.6931471805599453) : "
                f"((({a[0]} > {a[1]}) ? {a[0]} : {a[1]}) + {_fn('log1p', ctype)}("
                f"{_fn('exp', ctype)}(-{_fn('fabs', ctype)}({a[0]} - {a[1]})))))")
    if op == "sigmoid":
        return f"({one} / ({one} + {_fn('exp', ctype)}(-{a[0]})))"
    if op == "softplus":  # max(x, 0) + log1p(exp(-|x|)): no overflow; NaN stays NaN
        return (f"((({a[0]} > 0) ? {a[0]} : ({one} - {one})) + "
                f"{_fn('log1p', ctype)}({_fn('exp', ctype)}(-{_fn('fabs', ctype)}({a[0]}))))")
    return f"{_fn(_FN[op], ctype)}({a[0]})"
