"""Class-index and class-probability losses (nll_loss, cross_entropy) on bad arguments:
PyTorch's exception class for each, in PyTorch's order of checks; and the calls PyTorch
accepts that look wrong (a 1-D input with a target of shape (1,), negative label
smoothing), with PyTorch's values."""
import numpy as np
import pytest

import tapegrad as tg

torch = pytest.importorskip("torch")


def _cases(M):
    F = M.nn.functional
    x = M.tensor(np.linspace(-1, 1, 12).reshape(4, 3))
    lp = F.log_softmax(x, 1)
    yi = M.tensor([0, 2, 1, 0])
    return {
        "nll_float_target": lambda: F.nll_loss(lp, yi.double()),
        "nll_int32_target": lambda: F.nll_loss(lp, yi.int()),
        "nll_bool_target": lambda: F.nll_loss(lp, yi.bool()),
        "nll_target_batch": lambda: F.nll_loss(lp, M.tensor([0, 1])),
        "nll_target_0d": lambda: F.nll_loss(lp, yi[0]),
        "nll_target_2d": lambda: F.nll_loss(lp, M.zeros(4, 3, dtype=M.int64)),
        "nll_float_target_2d": lambda: F.nll_loss(lp, M.zeros(4, 3)),
        "nll_out_of_range": lambda: F.nll_loss(lp, M.tensor([0, 3, 1, 0])),
        "nll_weight_shape": lambda: F.nll_loss(lp, yi, weight=M.ones(2)),
        "nll_weight_dtype": lambda: F.nll_loss(lp, yi, weight=M.ones(3)),
        "nll_input_0d": lambda: F.nll_loss(lp[0, 0], yi[0]),
        "nll_1d_target_of_2": lambda: F.nll_loss(lp[0], yi[:2]),
        "nll_1d_target_2d": lambda: F.nll_loss(lp[0], yi[:1].reshape(1, 1)),
        "nll_3d_target_batch": lambda: F.nll_loss(M.zeros(2, 3, 4), M.zeros(3, 4, dtype=M.int64)),
        "nll_3d_target_size": lambda: F.nll_loss(M.zeros(2, 3, 4), M.zeros(2, 5, dtype=M.int64)),
        "nll_3d_float_target": lambda: F.nll_loss(M.zeros(2, 3, 4), M.zeros(2, 4)),
        "ce_float_target_1d": lambda: F.cross_entropy(x, yi.double()),
        "ce_probs_of_other_shape": lambda: F.cross_entropy(x, M.zeros(4, 2)),
        "ce_probs_int": lambda: F.cross_entropy(x, M.ones(4, 3, dtype=M.int64)),
        "ce_probs_bool": lambda: F.cross_entropy(x, M.ones(4, 3, dtype=M.bool)),
        "ce_probs_ignore_index": lambda: F.cross_entropy(x, M.zeros(4, 3), ignore_index=1),
        "ce_probs_weight_shape": lambda: F.cross_entropy(x, M.zeros(4, 3), weight=M.ones(2)),
        "ce_label_smoothing_over_1": lambda: F.cross_entropy(x, yi, label_smoothing=1.5),
        "ce_weight_dtype": lambda: F.cross_entropy(x, yi, weight=M.ones(3)),
        "ce_3d_target_size": lambda: F.cross_entropy(M.zeros(2, 3, 4),
                                                     M.zeros(2, 5, dtype=M.int64)),
    }


@pytest.mark.parametrize("case", sorted(_cases(tg)))
def test_class_loss_errors_as_torch(case):
    def outcome(M):
        try:
            _cases(M)[case]()
        except Exception as e:  # noqa: BLE001 (the class is what is compared)
            return type(e)
        return None
    ours, theirs = outcome(tg), outcome(torch)
    assert theirs is not None, "the case must be an error in PyTorch"
    assert ours is theirs, (ours, theirs)


def test_float_target_names_the_dtypes_expected():
    with pytest.raises(RuntimeError, match="nll_loss: expected target dtype to be Long or Byte"):
        tg.nn.functional.nll_loss(tg.zeros(4, 3), tg.zeros(4))


@pytest.mark.parametrize("call", [
    lambda M: M.nn.functional.nll_loss(M.tensor([-0.5, -1.5, -2.5]), M.tensor([1]),
                                       reduction="none"),
    lambda M: M.nn.functional.cross_entropy(M.tensor([[0.1, 0.7, -0.3]] * 2),
                                            M.tensor([1, 2]), label_smoothing=-0.2),
    lambda M: M.nn.functional.cross_entropy(M.tensor([[0.1, 0.7, -0.3]] * 2),
                                            M.tensor([[0.2, 0.3, 0.5]] * 2), label_smoothing=-1.0,
                                            ignore_index=-7),
])
def test_accepted_odd_calls_as_torch(call):
    ours, theirs = call(tg), call(torch)
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
