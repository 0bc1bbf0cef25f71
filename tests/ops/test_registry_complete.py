"""Every public op function is in the registry (API.md, "Operators registry"): each
name of ``tg.ops.__all__`` and ``tg.nn.functional.__all__`` that is a function has an
entry in ``list_ops()``, composites and aliases included, so the registry-driven tests
(values against PyTorch, gradients, forward mode, vmap, bad input) cover it.
"""
import inspect

import tapegrad as tg
import tapegrad.nn.functional as F

# The public functions that are not in the registry, each with its reason.
NOT_OPS = {
    # the random generator's state, not tensor functions
    "manual_seed": "sets the generator's state",
    "seed": "sets the generator's state",
    "initial_seed": "reads the generator's seed",
    "get_rng_state": "reads the generator's state",
    "set_rng_state": "sets the generator's state",
    # in-place variants: the registry's harness differentiates leaves (which an in-place
    # op refuses, as PyTorch) and vmaps the op's inputs (vmap refuses writing into a
    # batched tensor); scatter, scatter_add and masked_fill themselves are ops
    "scatter_": "in-place variant of the op scatter",
    "scatter_add_": "in-place variant of the op scatter_add",
    "masked_fill_": "in-place variant of the op masked_fill",
    # nn.functional's in-place spellings (each over its registered op)
    **{n: "in-place variant of an nn.functional op" for n in (
        "relu_", "elu_", "celu_", "selu_", "leaky_relu_", "hardtanh_", "threshold_", "rrelu_")},
    # its Gumbel noise is drawn anew at each call: no sample differentiates by finite
    # differences (tests/nn/test_modules_vs_torch.py checks it against the generator)
    "gumbel_softmax": "random at every call: tested against the generator's next draw",
}


def _public_functions():
    names = set()
    for mod, listed in ((tg.ops, tg.ops.__all__), (F, F.__all__)):
        for n in listed:
            v = getattr(mod, n, None)
            if callable(v) and not inspect.isclass(v):
                names.add(n)
    return names


def test_every_public_op_function_is_registered():
    registered = {op.name for op in tg.ops_registry.list_ops()}
    missing = sorted(_public_functions() - registered - set(NOT_OPS))
    assert not missing, f"public op functions missing from list_ops(): {missing}"


def test_the_exclusions_are_public_and_unregistered():
    """The exclusion list stays exact: no stale name, none that is in fact registered."""
    registered = {op.name for op in tg.ops_registry.list_ops()}
    public = _public_functions()
    assert set(NOT_OPS) <= public, sorted(set(NOT_OPS) - public)
    assert not set(NOT_OPS) & registered, sorted(set(NOT_OPS) & registered)


def test_a_composite_runs_its_public_function():
    """A registered composite is the public function: calling the op records the
    function's own ops (transpose -> permute), and its errors name the op."""
    from tapegrad.dispatch import bind
    x = tg.ones(2, 3, requires_grad=True)
    y = bind(tg.ops_registry.get("swapaxes"), x, 0, 1)
    assert tuple(y.shape) == (3, 2) and y.grad_fn is not None
    op = tg.ops_registry.get("concatenate")
    assert op.composite is not None and op.args == ("tensors",)
    try:
        bind(op, tg.ones(2, 3), tg.ones(2, 4), dim=0)
    except RuntimeError as e:
        assert str(e).startswith("concatenate: "), str(e)
    else:
        raise AssertionError("concatenate of mismatched shapes did not raise")
