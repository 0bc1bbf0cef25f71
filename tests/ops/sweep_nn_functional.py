"""Valid calls for the bad-input sweep (``test_sweep_bad_input.py``) of the
composite nn.functional names (``ops/nn/activation.py``, ``loss.py``, ``loss_ctc.py``,
``norm.py``, ``regularization.py``, ``pool_nd.py``, ``pool_fractional.py``, ``conv_nd.py``,
``spatial.py``, ``affine.py``, ``sparse.py``, ``distance.py``, ``nn/functional.py``); the
sweep builds its bad cases from these."""
import numpy as np

# random results (dropouts in training, Gumbel noise): compared by shape only
RANDOM = {"dropout1d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "gumbel_softmax",
          "fractional_max_pool2d", "fractional_max_pool3d"}


def extend(VALID, A, U, I, B, Raw, DT):  # noqa: E741 (the sweep's helper names)
    sign = np.where(A(3, 4) > 0, 1.0, -1.0)
    # activations
    VALID.update({n: ((A(3, 4),), {}) for n in """selu hardsigmoid hardswish relu6 softsign
        tanhshrink relu_ selu_""".split()})
    VALID.update({
        "celu": ((A(3, 4),), {"alpha": 1.5}), "celu_": ((A(3, 4),), {"alpha": 1.5}),
        "elu_": ((A(3, 4),), {"alpha": 1.0}),
        "leaky_relu_": ((A(3, 4),), {"negative_slope": 0.1}),
        "hardshrink": ((A(3, 4),), {"lambd": 0.5}), "softshrink": ((A(3, 4),), {"lambd": 0.5}),
        "hardtanh": ((A(3, 4),), {"min_val": -0.5, "max_val": 0.5}),
        "hardtanh_": ((A(3, 4),), {"min_val": -0.5, "max_val": 0.5}),
        "threshold": ((A(3, 4), 0.1, 2.0), {}), "threshold_": ((A(3, 4), 0.1, 2.0), {}),
        "glu": ((A(3, 4),), {"dim": 1}), "softmin": ((A(3, 4),), {"dim": 1}),
        "prelu": ((A(2, 3, 4), U(3)), {}),
        "rrelu": ((A(3, 4),), {"lower": 0.1, "upper": 0.3}),
        "rrelu_": ((A(3, 4),), {"lower": 0.1, "upper": 0.3}),
    })
    # losses
    VALID.update({
        "cosine_embedding_loss": ((A(3, 4), A(3, 4), np.array([1.0, -1.0, 1.0])), {}),
        "gaussian_nll_loss": ((A(3, 4), A(3, 4), U(3, 4)), {}),
        "hinge_embedding_loss": ((A(3, 4), sign), {"margin": 1.0}),
        "kl_div": ((np.log(U(3, 4)), U(3, 4)), {"reduction": "batchmean"}),
        "margin_ranking_loss": ((A(3), A(3), np.array([1.0, -1.0, 1.0])), {"margin": 0.5}),
        "multi_margin_loss": ((A(3, 5), I([0, 2, 4])), {}),
        "multilabel_margin_loss": ((A(3, 4), I([[3, 0, -1, 1], [1, 2, 3, -1], [0, -1, 1, 2]])), {}),
        "multilabel_soft_margin_loss": ((A(3, 4), (sign > 0).astype(np.float64)), {}),
        "poisson_nll_loss": ((A(3, 4), U(3, 4)), {}),
        "soft_margin_loss": ((A(3, 4), sign), {}),
        "triplet_margin_loss": ((A(3, 4), A(3, 4), A(3, 4)), {"margin": 1.0}),
        "triplet_margin_with_distance_loss": ((A(3, 4), A(3, 4), A(3, 4)), {"margin": 1.0}),
        "linear_cross_entropy": ((A(3, 4), A(5, 4), I([0, 2, 4])), {}),
    })
    # pooling
    VALID.update({
        "avg_pool1d": ((A(1, 2, 6), 2), {"stride": 2, "padding": 1}),
        "max_pool1d": ((A(1, 2, 6), 2), {"stride": 2, "padding": 1}),
        "adaptive_avg_pool1d": ((A(1, 2, 6), 3), {}),
        "adaptive_max_pool1d": ((A(1, 2, 6), 3), {}),
        "adaptive_max_pool2d": ((A(1, 2, 6, 6), 3), {}),
        "lp_pool1d": ((A(1, 2, 6), 2.0, 2), {"stride": 2}),
        "lp_pool2d": ((A(1, 2, 6, 6), 2.0, 2), {"stride": 2}),
        "avg_pool3d": ((A(1, 2, 4, 4, 4), 2), {"stride": 2, "padding": 1}),
        "max_pool3d": ((A(1, 2, 4, 4, 4), 2), {"stride": 2, "padding": 1}),
        "adaptive_avg_pool3d": ((A(1, 2, 4, 4, 4), 2), {}),
        "adaptive_max_pool3d": ((A(1, 2, 4, 4, 4), 2), {}),
        "lp_pool3d": ((A(1, 2, 4, 4, 4), 2.0, 2), {}),
        "max_unpool1d": ((A(1, 2, 3), I([[[0, 3, 4], [1, 2, 5]]]), 2), {}),
        "max_unpool2d": ((A(1, 1, 2, 2), I([[[[0, 3], [9, 14]]]]), 2), {}),
        "max_unpool3d": ((A(1, 1, 1, 1, 1), I([[[[[5]]]]]), 2), {}),
    })
    # distances, normalization, shuffles
    VALID.update({
        "cosine_similarity": ((A(3, 4), A(3, 4)), {"dim": 1}),
        "pairwise_distance": ((A(3, 4), A(3, 4)), {"p": 2.0}),
        "pdist": ((A(4, 3),), {"p": 2.0}),
        "normalize": ((A(3, 4),), {"p": 2.0, "dim": 1}),
        "pixel_shuffle": ((A(1, 8, 2, 3), 2), {}),
        "pixel_unshuffle": ((A(1, 2, 4, 6), 2), {}),
        "channel_shuffle": ((A(1, 4, 2, 2), 2), {}),
        "instance_norm": ((A(2, 3, 4),), {"weight": A(3), "bias": A(3)}),
        "local_response_norm": ((A(2, 4, 5), 3), {"alpha": 1e-3}),
        "rms_norm": ((A(3, 4), (4,)), {"weight": A(4), "eps": 1e-5}),
    })
    # the rest
    VALID.update({
        "dropout1d": ((A(2, 3, 4),), {"p": 0.5}),
        "dropout3d": ((A(2, 3, 2, 2, 2),), {"p": 0.5}),
        "alpha_dropout": ((A(3, 4),), {"p": 0.5, "training": True}),
        "feature_alpha_dropout": ((A(2, 3, 4, 4),), {"p": 0.5, "training": True}),
        "gumbel_softmax": ((A(3, 4),), {"tau": 1.0, "dim": 1}),
        "bilinear": ((A(3, 4), A(3, 5), A(2, 4, 5), A(2)), {}),
        "conv_transpose1d": ((A(1, 2, 4), A(2, 3, 3), A(3)), {"stride": 2, "padding": 1}),
        "conv_tbc": ((A(5, 1, 2), A(3, 2, 4), A(4)), {"pad": 1}),
        "upsample": ((A(1, 2, 3, 4),), {"size": (5, 6), "mode": "bilinear",
                                        "align_corners": False}),
        "upsample_nearest": ((A(1, 2, 3, 4),), {"size": (5, 6)}),
        "upsample_bilinear": ((A(1, 2, 3, 4),), {"size": (5, 6)}),
        "embedding_bag": ((I([0, 2, 1, 3]), A(4, 3)), {"offsets": I([0, 2])}),
        "multi_head_attention_forward": ((A(3, 2, 4), A(5, 2, 4), A(5, 2, 4), 4, 2, A(12, 4),
                                          A(12), None, None, False, 0.0, A(4, 4), A(4)), {}),
        "affine_grid": ((A(1, 2, 3), (1, 1, 4, 5)), {"align_corners": False}),
    })
    # 3-d convolutions, grid_sample, ctc_loss (ops/nn/conv_nd.py, spatial.py, loss_ctc.py)
    lp = np.log(U(6, 2, 4) / U(6, 2, 4).sum(-1, keepdims=True))
    VALID.update({
        "conv3d": ((A(1, 2, 4, 4, 3), A(3, 2, 2, 2, 2), A(3)), {"stride": 1, "padding": 1}),
        "conv_transpose3d": ((A(1, 2, 3, 3, 2), A(2, 3, 2, 2, 2), A(3)),
                             {"stride": 2, "padding": 1, "output_padding": 1}),
        "grid_sample": ((A(1, 2, 4, 5), A(1, 3, 2, 2) * 0.9),
                        {"mode": "bilinear", "padding_mode": "zeros", "align_corners": False}),
        "ctc_loss": ((lp, I([[1, 2, 2], [3, 1, 0]]), I([6, 5]), I([3, 2])),
                     {"blank": 0, "reduction": "mean"}),
        # random windows (their samples drawn per call): compared by shape
        "fractional_max_pool2d": ((A(1, 2, 6, 6), 2), {"output_size": 3}),
        "fractional_max_pool3d": ((A(1, 2, 4, 4, 4), 2), {"output_size": 2}),
    })
