"""How much of PyTorch's ``nn.functional`` and ``nn`` modules tapegrad covers: the lists
of ``nn_surface.py``, each name counted when it exists and its smoke call agrees with
PyTorch's. Prints the figures and the missing names (``pytest -s``, or
``python tests/surface/test_nn_surface.py``)."""
import os
import sys
import warnings

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nn_surface as C  # noqa: E402

import tapegrad as tg  # noqa: E402

F_TARGET, M_TARGET = 0.75, 0.70


def _leaves(out):
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _leaves(o)]
    if out is None:
        return [None]
    if isinstance(out, torch.Tensor):
        return [out.detach().numpy()]
    if isinstance(out, tg.Tensor):
        return [np.asarray(out.detach().numpy())]
    return [np.asarray(out)]


def _agree(a, b, random):
    la, lb = _leaves(a), _leaves(b)
    if len(la) != len(lb):
        return f"{len(lb)} outputs, PyTorch {len(la)}"
    for x, y in zip(la, lb):
        if (x is None) != (y is None):
            return "None where PyTorch's is not (or the reverse)"
        if x is None:
            continue
        if x.shape != y.shape:
            return f"shape {y.shape}, PyTorch {x.shape}"
        if not random and not np.allclose(y.astype(np.float64), x.astype(np.float64),
                                          rtol=1e-4, atol=1e-5, equal_nan=True):
            return f"values differ by {np.max(np.abs(y - x)):.3g}"
    return None


def check_functional(name):
    """None when ``tg.nn.functional.<name>`` agrees with PyTorch's, else why not."""
    if not hasattr(tg.nn.functional, name):
        return "missing"
    smoke = C.FUNCTIONAL_SMOKE[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = smoke(torch)
        try:
            out = smoke(tg)
        except Exception as e:  # noqa: BLE001  (the coverage reports, the op tests judge)
            return f"{type(e).__name__}: {e}"[:160]
    return _agree(ref, out, name in C.RANDOM_F)


def check_module(name):
    """None when ``tg.nn.<name>`` builds with PyTorch's state dict keys and shapes and,
    with PyTorch's weights loaded, its smoke call agrees; else why not."""
    if not hasattr(tg.nn, name):
        return "missing"
    spec = C.MODULES_SMOKE[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        mt = spec.build(torch, name)
        try:
            mg = spec.build(tg, name)
            st, sg = mt.state_dict(), mg.state_dict()
            if list(st) != list(sg):
                return f"state dict keys {list(sg)}, PyTorch {list(st)}"
            for k in st:
                if tuple(st[k].shape) != tuple(sg[k].shape):
                    return f"{k}: shape {tuple(sg[k].shape)}, PyTorch {tuple(st[k].shape)}"
            mg.load_state_dict({k: tg.tensor(v.detach().numpy()) for k, v in st.items()})
            ref = spec.run(mt, torch)
            out = spec.run(mg, tg)
        except Exception as e:  # noqa: BLE001
            return f"{type(e).__name__}: {e}"[:160]
    return _agree(ref, out, name in C.RANDOM_M)


def coverage():
    """``{"functional": {name: reason or None}, "modules": {...}}``."""
    return {"functional": {n: check_functional(n) for n in C.FUNCTIONAL},
            "modules": {n: check_module(n) for n in C.MODULES}}


def report(result):
    lines = []
    for kind, target in (("functional", F_TARGET), ("modules", M_TARGET)):
        res = result[kind]
        ok = sum(r is None for r in res.values())
        lines.append(f"nn.{kind}: {ok}/{len(res)} = {ok / len(res):.1%} "
                     f"(target {target:.0%})")
        for n, r in res.items():
            if r is not None:
                lines.append(f"    missing {n}: {r}")
    return "\n".join(lines)


def test_surface_lists_follow_their_rule():
    """The frozen lists are the rule applied to PyTorch 2.13; every name has a smoke call."""
    assert set(C.FUNCTIONAL_SMOKE) == set(C.FUNCTIONAL)
    assert set(C.MODULES_SMOKE) == set(C.MODULES)
    assert C.RANDOM_F <= set(C.FUNCTIONAL) and C.RANDOM_M <= set(C.MODULES)
    if torch.__version__.startswith("2.13"):
        fns, mods = C.derive(torch)
        assert fns == C.FUNCTIONAL
        assert mods == tuple(sorted(C.MODULES))
    for n in C.FUNCTIONAL:  # every smoke call runs in PyTorch
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            C.FUNCTIONAL_SMOKE[n](torch)


def test_nn_coverage():
    """At least F_TARGET of nn.functional and M_TARGET of the nn modules agree with PyTorch."""
    result = coverage()
    text = report(result)
    print("\n" + text)
    f = result["functional"]
    m = result["modules"]
    fcov = sum(r is None for r in f.values()) / len(f)
    mcov = sum(r is None for r in m.values()) / len(m)
    assert fcov >= F_TARGET and mcov >= M_TARGET, text


def test_coverage_counts_a_wrong_answer_as_missing(monkeypatch):
    """The coverage count can fail: a function giving wrong values is not counted."""
    monkeypatch.setattr(tg.nn.functional, "relu", lambda x, inplace=False: x * 2)
    assert check_functional("relu").startswith("values differ")
    monkeypatch.delattr(tg.nn, "Linear")
    assert check_module("Linear") == "missing"


if __name__ == "__main__":
    print(report(coverage()))
    pytest.main([__file__, "-q", "-p", "no:cacheprovider"])
