"""``tg.distributions``, as ``torch.distributions``: ``Normal``, ``Uniform``,
``Bernoulli``, ``Categorical``, ``OneHotCategorical``, ``Gamma``, ``Beta``,
``Dirichlet``, ``MultivariateNormal``, their ``sample``/``rsample``/``log_prob``/
``entropy``/statistics, argument validation, and ``kl_divergence`` with
``register_kl``. Built from tapegrad ops, so log-densities, entropies, KLs and
reparameterised samples differentiate (at every order, except through Gamma, Beta and
Dirichlet samples: once, as PyTorch)."""
from . import constraints
from .categorical import Bernoulli, Categorical, OneHotCategorical
from .distribution import Distribution
from .gamma import Beta, Dirichlet, Gamma
from .kl import kl_divergence, register_kl
from .multivariate_normal import MultivariateNormal
from .normal import Normal, Uniform

__all__ = ["Bernoulli", "Beta", "Categorical", "Dirichlet", "Distribution", "Gamma",
           "MultivariateNormal", "Normal", "OneHotCategorical", "Uniform", "constraints",
           "kl_divergence", "register_kl"]
