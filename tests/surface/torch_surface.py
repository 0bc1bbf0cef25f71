"""The list of PyTorch's everyday ``torch.*`` functions and ``Tensor`` methods,
frozen here so the coverage figure cannot drift with the code.

Rule for the functions (``FUNCTIONS``)
    The names listed in the autosummary tables of PyTorch's ``torch`` reference page
    (``docs/source/torch.rst`` of PyTorch's main branch, 2.x), sections: Tensors,
    Creation Ops, Indexing/Slicing/Joining/Mutating Ops, Random sampling,
    Serialization, Parallelism, Locally disabling gradient computation, Math
    operations (Pointwise, Reduction, Comparison, Other, BLAS and LAPACK) and
    Utilities, transcribed section by section below in the page's order. Sections left
    out whole: Accelerators (device streams/events), Generators and Quasi-random
    sampling (classes), Spectral Ops (``stft``/``istft`` are complex-valued; the windows
    belong to that family), Foreach Operations (private ``_foreach_*`` names), Symbolic
    Numbers, Export Path, Control Flow, Optimizations and Operator Tags (the
    compile/fx/export machinery). Then ``EXCLUDE_PATTERNS`` below removes, by pattern,
    names in the excluded families.

Rule for the Tensor methods (``METHODS``)
    ``dir(torch.Tensor)`` of the installed PyTorch (2.13), public names (no leading
    underscore, so dunders out), in-place variants included; then the same
    ``EXCLUDE_PATTERNS`` (which also drop the removed APIs still in ``dir``: their
    PyTorch methods only raise "removed", or, ``volatile``, answer False). ``derive_methods()``
    recomputes it, and the test
    checks the frozen list against it when that PyTorch version is installed.

Exclusions (fnmatch patterns, one family each; applied to both lists):
"""
import fnmatch

EXCLUDE_PATTERNS = {
    "device": ["*_default_device", "set_flush_denormal", "xpu", "ipu", "mtia", "is_xpu",
               "is_ipu", "is_mtia", "is_xla", "is_mps", "is_meta", "is_vulkan", "is_hpu",
               "is_maia", "is_mkldnn", "to_mkldnn", "pin_memory", "is_pinned",
               "record_stream", "share_memory_", "is_shared", "get_device_module"],
    "storage": ["*storage*", "*data_ptr", "set_", "is_set_to", "resize*", "as_strided*",
                "*_strided", "from_file", "frombuffer", "set_default_tensor_type",
                "module_load", "as_subclass"],
    "sparse": ["*sparse*", "to_dense", "coalesce", "is_coalesced", "indices", "values",
               "*_indices", "dense_dim", "smm", "sspaddmm"],
    "quantized": ["*quant*", "q_*", "int_repr", "qscheme"],
    "named tensor": ["names", "rename", "rename_", "refine_names", "align_to", "align_as",
                     "has_names", "name"],
    "nested tensor": ["is_nested", "to_padded_tensor"],
    "complex-only": ["*complex*", "*conj*", "real", "imag", "angle", "polar", "chalf",
                     "cfloat", "cdouble", "resolve_neg", "is_neg", "view_as_real*"],
    "removed from PyTorch": ["eig", "lstsq", "solve", "symeig", "reinforce", "volatile"],
    "spectral (complex)": ["stft", "istft"],
    "distributed/jit/fx internals": ["is_distributed", "dim_order", "grad_dtype",
                                     "compiled_with_cxx11_abi", "*deterministic*",
                                     "*float32_matmul_precision", "*warn_always*"],
}


def excluded(name):
    """The excluded family ``name`` falls in, or None."""
    for family, pats in EXCLUDE_PATTERNS.items():
        if any(fnmatch.fnmatchcase(name, p) for p in pats):
            return family
    return None


# torch.rst, section by section (the page's order), before exclusions
TORCH_RST = {
    "Tensors": """is_tensor is_storage is_complex is_conj is_floating_point is_nonzero
        set_default_dtype get_default_dtype set_default_device get_default_device
        set_default_tensor_type numel set_printoptions set_flush_denormal""",
    "Creation Ops": """tensor sparse_coo_tensor sparse_csr_tensor sparse_csc_tensor
        sparse_bsr_tensor sparse_bsc_tensor asarray as_tensor as_strided from_file
        from_numpy from_dlpack frombuffer zeros zeros_like ones ones_like arange range
        linspace logspace eye empty empty_like empty_strided full full_like
        quantize_per_tensor quantize_per_channel dequantize complex polar heaviside""",
    "Indexing, Slicing, Joining, Mutating Ops": """adjoint argwhere cat concat concatenate
        conj chunk dsplit column_stack dstack gather hsplit hstack index_add index_copy
        index_reduce index_select masked_select movedim moveaxis narrow narrow_copy
        nonzero permute reshape row_stack select scatter diagonal_scatter select_scatter
        slice_scatter scatter_add scatter_reduce segment_reduce split squeeze stack
        swapaxes swapdims t take take_along_dim tensor_split tile transpose unbind
        unravel_index unsqueeze vsplit vstack where""",
    "Random sampling": """seed manual_seed initial_seed get_rng_state set_rng_state
        bernoulli multinomial normal poisson rand rand_like randint randint_like randn
        randn_like randperm""",
    "Serialization": "save load",
    "Parallelism": """get_num_threads set_num_threads get_num_interop_threads
        set_num_interop_threads""",
    "Locally disabling gradient computation": """no_grad enable_grad set_grad_enabled
        is_grad_enabled inference_mode is_inference_mode_enabled""",
    "Pointwise Ops": """abs absolute acos arccos acosh arccosh add addcdiv addcmul angle
        asin arcsin asinh arcsinh atan arctan atanh arctanh atan2 arctan2 bitwise_not
        bitwise_and bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift ceil
        clamp clip conj_physical copysign cos cosh deg2rad div divide digamma erf erfc
        erfinv exp exp2 expm1 fake_quantize_per_channel_affine
        fake_quantize_per_tensor_affine fix float_power floor floor_divide fmod frac
        frexp gradient imag ldexp lerp lgamma log log10 log1p log2 logaddexp logaddexp2
        logical_and logical_not logical_or logical_xor logit hypot i0 igamma igammac mul
        multiply mvlgamma nan_to_num neg negative nextafter polygamma positive pow
        quantized_batch_norm quantized_max_pool1d quantized_max_pool2d rad2deg real
        reciprocal remainder round rsqrt sigmoid sign sgn signbit sin sinc sinh softmax
        sqrt square sub subtract tan tanh true_divide trunc xlogy""",
    "Reduction Ops": """argmax argmin amax amin aminmax all any max min dist logsumexp mean
        nanmean median nanmedian mode norm nansum prod quantile nanquantile std std_mean
        sum unique unique_consecutive var var_mean count_nonzero hash_tensor""",
    "Comparison Ops": """allclose argsort eq equal ge greater_equal gt greater isclose
        isfinite isin isinf isposinf isneginf isnan isreal kthvalue le less_equal lt less
        maximum minimum fmax fmin ne not_equal sort topk msort""",
    "Other Operations": """atleast_1d atleast_2d atleast_3d bincount block_diag
        broadcast_tensors broadcast_to broadcast_shapes bucketize cartesian_prod cdist
        clone combinations corrcoef cov cross cummax cummin cumprod cumsum diag
        diag_embed diagflat diagonal diff einsum flatten flip fliplr flipud kron rot90
        gcd histc histogram histogramdd meshgrid lcm logcumsumexp ravel renorm
        repeat_interleave roll searchsorted tensordot trace tril tril_indices triu
        triu_indices unflatten vander view_as_real view_as_complex resolve_conj
        resolve_neg""",
    "BLAS and LAPACK Operations": """addbmm addmm addmv addr baddbmm bmm chain_matmul
        cholesky cholesky_inverse cholesky_solve dot geqrf ger inner inverse det logdet
        slogdet lu lu_solve lu_unpack matmul matrix_power matrix_exp mm mv orgqr ormqr
        outer pinverse qr svd svd_lowrank pca_lowrank lobpcg trapz trapezoid
        cumulative_trapezoid triangular_solve vdot""",
    "Utilities": """compiled_with_cxx11_abi result_type can_cast promote_types
        use_deterministic_algorithms are_deterministic_algorithms_enabled
        is_deterministic_algorithms_warn_only_enabled set_deterministic_debug_mode
        get_deterministic_debug_mode set_float32_matmul_precision
        get_float32_matmul_precision set_warn_always get_device_module
        is_warn_always_enabled vmap _assert typename""",
}


def _functions():
    seen = []
    for names in TORCH_RST.values():
        for n in names.split():
            if n not in seen and not n.startswith("_") and excluded(n) is None:
                seen.append(n)
    return tuple(seen)


FUNCTIONS = _functions()

TORCH_VERSION = "2.13"  # the PyTorch whose dir(torch.Tensor) METHODS was derived from

# derive_methods() under PyTorch 2.13, frozen
METHODS = tuple("""
H T abs abs_ absolute absolute_ acos acos_ acosh acosh_ add add_ addbmm addbmm_ addcdiv
addcdiv_ addcmul addcmul_ addmm addmm_ addmv addmv_ addr addr_ adjoint all allclose amax
amin aminmax any apply_ arccos arccos_ arccosh arccosh_ arcsin arcsin_ arcsinh arcsinh_
arctan arctan2 arctan2_ arctan_ arctanh arctanh_ argmax argmin argsort argwhere asin asin_
asinh asinh_ atan atan2 atan2_ atan_ atanh atanh_ backward baddbmm baddbmm_ bernoulli
bernoulli_ bfloat16 bincount bitwise_and bitwise_and_ bitwise_left_shift
bitwise_left_shift_ bitwise_not bitwise_not_ bitwise_or bitwise_or_ bitwise_right_shift
bitwise_right_shift_ bitwise_xor bitwise_xor_ bmm bool broadcast_to byte cauchy_ ceil
ceil_ char cholesky cholesky_inverse cholesky_solve chunk clamp clamp_ clamp_max
clamp_max_ clamp_min clamp_min_ clip clip_ clone contiguous copy_ copysign copysign_
corrcoef cos cos_ cosh cosh_ count_nonzero cov cpu cross cuda cummax cummin cumprod
cumprod_ cumsum cumsum_ data deg2rad deg2rad_ det detach detach_ device diag diag_embed
diagflat diagonal diagonal_scatter diff digamma digamma_ dim dist div div_ divide divide_
dot double dsplit dtype element_size eq eq_ equal erf erf_ erfc erfc_ erfinv erfinv_ exp
exp2 exp2_ exp_ expand expand_as expm1 expm1_ exponential_ fill_ fill_diagonal_ fix fix_
flatten flip fliplr flipud float float_power float_power_ floor floor_ floor_divide
floor_divide_ fmax fmin fmod fmod_ frac frac_ frexp gather gcd gcd_ ge ge_ geometric_
geqrf ger get_device grad grad_fn greater greater_ greater_equal greater_equal_ gt gt_
half hardshrink hash_tensor heaviside heaviside_ histc histogram hsplit hypot hypot_ i0
i0_ igamma igamma_ igammac igammac_ index index_add index_add_ index_copy index_copy_
index_fill index_fill_ index_put index_put_ index_reduce index_reduce_ index_select inner
int inverse is_contiguous is_cpu is_cuda is_floating_point is_inference is_leaf is_nonzero
is_same_size is_signed isclose isfinite isinf isnan isneginf isposinf isreal item itemsize
kron kthvalue layout lcm lcm_ ldexp ldexp_ le le_ lerp lerp_ less less_ less_equal
less_equal_ lgamma lgamma_ log log10 log10_ log1p log1p_ log2 log2_ log_ log_normal_
log_softmax logaddexp logaddexp2 logcumsumexp logdet logical_and logical_and_ logical_not
logical_not_ logical_or logical_or_ logical_xor logical_xor_ logit logit_ logsumexp long
lt lt_ lu lu_solve mH mT map2_ map_ masked_fill masked_fill_ masked_scatter
masked_scatter_ masked_select matmul matrix_exp matrix_power max maximum mean median min
minimum mm mode moveaxis movedim msort mul mul_ multinomial multiply multiply_ mv mvlgamma
mvlgamma_ nan_to_num nan_to_num_ nanmean nanmedian nansum narrow narrow_copy nbytes ndim
ndimension ne ne_ neg neg_ negative negative_ nelement new new_empty new_full new_ones
new_tensor new_zeros nextafter nextafter_ nonzero nonzero_static norm normal_ not_equal
not_equal_ numel numpy orgqr ormqr outer output_nr permute pinverse polygamma polygamma_
positive pow pow_ prelu prod put put_ qr rad2deg rad2deg_ random_ ravel reciprocal
reciprocal_ register_hook register_post_accumulate_grad_hook relu relu_ remainder
remainder_ renorm renorm_ repeat repeat_interleave requires_grad requires_grad_ reshape
reshape_as retain_grad retains_grad roll rot90 round round_ rsqrt rsqrt_ scatter scatter_
scatter_add scatter_add_ scatter_reduce scatter_reduce_ select select_scatter sgn sgn_
shape short sigmoid sigmoid_ sign sign_ signbit sin sin_ sinc sinc_ sinh sinh_ size
slice_inverse slice_scatter slogdet softmax sort split split_with_sizes sqrt sqrt_ square
square_ squeeze squeeze_ std stride sub sub_ subtract subtract_ sum sum_to_size svd
swapaxes swapaxes_ swapdims swapdims_ t t_ take take_along_dim tan tan_ tanh tanh_
tensor_split tile to tolist topk trace transpose transpose_ triangular_solve tril tril_
triu triu_ true_divide true_divide_ trunc trunc_ type type_as unbind unflatten unfold
uniform_ unique unique_consecutive unsafe_chunk unsafe_split unsafe_split_with_sizes
unsqueeze unsqueeze_ var vdot view view_as vsplit where xlogy xlogy_ zero_
""".split())


def derive_methods():
    """``METHODS`` recomputed from the installed PyTorch (the rule above)."""
    import torch
    out = []
    for n in sorted(dir(torch.Tensor)):
        if n.startswith("_") or excluded(n) is not None:
            continue
        out.append(n)
    return tuple(out)
