"""Hand-written CUDA kernels for hot row-wise ops on CuPy arrays: softmax and
log_softmax over the last dim, and layer_norm's forward over trailing dims.

The sources are plain strings (``softmax_source``, ``layer_norm_source``), generated
without CuPy so that tests check them on any machine; the launchers (``softmax``,
``layer_norm``) compile them once per dtype through ``cuda.raw_kernel`` and return
None for a case they do not cover (the caller's array code runs instead).

One block per row: the block reads its row to reduce it (a max, then a sum of
exponentials; for layer_norm a sum and a sum of squared deviations), each thread
striding over the row, combined by warp shuffles and one shared slot per warp; then
it writes the row. A row is read from global memory two or three times and written
once; at the sizes that matter a row fits in L1/L2, so device memory sees about one
read and one write per element, as PyTorch's kernels.
"""
import numpy as np

BLOCK = 256  # threads per row-block (a multiple of 32, at most 1024)
_PREAMBLE = ("#define TG_INF __longlong_as_double(0x7ff0000000000000ULL)\n"
             "#define TG_NAN __longlong_as_double(0x7ff8000000000000ULL)\n")


def _ctype(dtype):
    dt = np.dtype(dtype)
    if dt == np.float32:
        return "float"
    if dt == np.float64:
        return "double"
    raise ValueError(f"no CUDA row kernel for dtype {dt}")


def _f(name, ctype):
    """The C math function for ``ctype`` (``expf`` for float, ``exp`` for double)."""
    return name + "f" if ctype == "float" else name


def _block_reduce(ctype):
    """Device functions: the sum and the max (NaN-propagating) of one value per thread
    over the block, every thread getting the result."""
    return f"""
__device__ __forceinline__ {ctype} tg_max2({ctype} a, {ctype} b) {{
    return (a != a || a > b) ? a : b;   // NaN wins, as PyTorch's max
}}
__device__ __forceinline__ {ctype} tg_block_sum({ctype} v, {ctype}* red) {{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = (threadIdx.x < (blockDim.x >> 5)) ? red[lane] : ({ctype})0;
    if (warp == 0)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) red[0] = v;
    __syncthreads();
    v = red[0];
    __syncthreads();   // red is reused by the next reduction
    return v;
}}
__device__ __forceinline__ {ctype} tg_block_max({ctype} v, {ctype}* red) {{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = tg_max2(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = (threadIdx.x < (blockDim.x >> 5)) ? red[lane] : ({ctype})(-TG_INF);
    if (warp == 0)
        for (int o = 16; o > 0; o >>= 1) v = tg_max2(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x == 0) red[0] = v;
    __syncthreads();
    v = red[0];
    __syncthreads();
    return v;
}}
"""


def softmax_source(dtype, log):
    """``(source, name)`` of ``kernel(x, y, cols)``: ``y`` = (log_)softmax of each
    row of the C-contiguous ``(gridDim.x, cols)`` array ``x``, launched with
    ``BLOCK`` threads per row."""
    c = _ctype(dtype)
    name = f"tg_{'log_' if log else ''}softmax_{c}"
    if log:
        write = "yr[j] = (xr[j] - m) - lse;"
        prep = f"const {c} lse = {_f('log', c)}(s);"
    else:
        write = f"yr[j] = {_f('exp', c)}(xr[j] - m) / s;"
        prep = ""
    src = _PREAMBLE + _block_reduce(c) + f"""
extern "C" __global__
void {name}(const {c}* __restrict__ x, {c}* __restrict__ y, const long long cols) {{
    __shared__ {c} red[32];
    const {c}* xr = x + (long long)blockIdx.x * cols;
    {c}* yr = y + (long long)blockIdx.x * cols;
    {c} m = ({c})(-TG_INF);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) m = tg_max2(m, xr[j]);
    m = tg_block_max(m, red);
    {c} s = 0;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) s += {_f('exp', c)}(xr[j] - m);
    s = tg_block_sum(s, red);
    {prep}
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {write}
}}
"""
    return src, name


def layer_norm_source(dtype, affine):
    """``(source, name)`` of ``kernel(x, [w, b,] y, cols, eps)``: each row of ``x``
    normalized (mean, then the biased variance of the deviations: two passes, as
    the composite computes it), then ``* w + b`` when ``affine``."""
    c = _ctype(dtype)
    name = f"tg_layer_norm_{c}{'_affine' if affine else ''}"
    params = [f"const {c}* __restrict__ x"]
    if affine:
        params += [f"const {c}* __restrict__ w", f"const {c}* __restrict__ b"]
    params += [f"{c}* __restrict__ y", "const long long cols", f"const {c} eps"]
    out = "(xr[j] - mean) * r * w[j] + b[j]" if affine else "(xr[j] - mean) * r"
    src = _PREAMBLE + _block_reduce(c) + f"""
extern "C" __global__
void {name}({', '.join(params)}) {{
    __shared__ {c} red[32];
    const {c}* xr = x + (long long)blockIdx.x * cols;
    {c}* yr = y + (long long)blockIdx.x * cols;
    {c} s = 0;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j];
    const {c} mean = tg_block_sum(s, red) / ({c})cols;
    {c} q = 0;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{
        const {c} d = xr[j] - mean;
        q += d * d;
    }}
    const {c} var = tg_block_sum(q, red) / ({c})cols;
    const {c} r = ({c})1 / {_f('sqrt', c)}(var + eps);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = {out};
}}
"""
    return src, name


def _rows(x, ndims):
    """``x`` as a C-contiguous (rows, cols) CuPy array over its trailing ``ndims``."""
    cols = int(np.prod(x.shape[x.ndim - ndims:])) if ndims else 1
    rows = x.size // cols if cols else 0
    return x.reshape(rows, cols), rows, cols


def softmax(x, dim, log=False):
    """(log_)softmax of CuPy array ``x`` over ``dim`` by the row kernel, or None when
    it does not apply (``dim`` not last, a dtype other than float32/float64, an
    empty or 0-d array)."""
    from . import cuda
    if x.ndim == 0 or dim % x.ndim != x.ndim - 1 or x.size == 0 or \
            np.dtype(x.dtype) not in (np.float32, np.float64):
        return None
    cp = cuda.cupy()
    x = cp.ascontiguousarray(x)
    x2, rows, cols = _rows(x, 1)
    y = cp.empty_like(x)
    kern = cuda.raw_kernel(*softmax_source(x.dtype, log))
    kern((rows,), (BLOCK,), (x2, y, cols))
    return y


def layer_norm(x, ndims, weight=None, bias=None, eps=1e-5):
    """layer_norm's forward over the trailing ``ndims`` dims of CuPy array ``x``
    (``weight`` and ``bias`` both given, or neither), or None when it does not
    apply."""
    from . import cuda
    dt = np.dtype(x.dtype)
    if dt not in (np.float32, np.float64) or x.size == 0 or (weight is None) != (bias is None):
        return None
    if weight is not None and (weight.dtype != dt or bias.dtype != dt):
        return None
    cp = cuda.cupy()
    x = cp.ascontiguousarray(x)
    x2, rows, cols = _rows(x, ndims)
    y = cp.empty_like(x)
    affine = weight is not None
    kern = cuda.raw_kernel(*layer_norm_source(dt, affine))
    args = [x2]
    if affine:
        args += [cp.ascontiguousarray(weight).reshape(-1), cp.ascontiguousarray(bias).reshape(-1)]
    kern((rows,), (BLOCK,), (*args, y, cols, dt.type(eps)))
    return y
