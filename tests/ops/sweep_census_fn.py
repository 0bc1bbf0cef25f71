"""Valid calls for the bad-input sweep (``test_sweep_bad_input.py``) of the functions
issue 17's census added (``ops/pointwise2.py``, ``reduce2.py``, ``shape2.py``,
``linalg2.py``); the sweep builds its bad cases from these."""


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
        "std_mean": ((A(3, 4),), {"dim": 1}), "var_mean": ((A(3, 4),), {"dim": 1}),
        "count_nonzero": ((A(3, 4),), {"dim": 1}), "logcumsumexp": ((A(3, 4), 1), {}),
    })
