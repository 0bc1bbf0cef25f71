"""Variational inference with torch.distributions: fit q = Beta(a, b) to the posterior of
a coin's bias after 14 heads and 6 tails (prior Beta(1, 1)) by maximising the ELBO with
reparameterised Beta samples (rsample) and the closed-form KL to the prior. The exact
posterior is Beta(15, 7)."""
import torch
from torch.distributions import Bernoulli, Beta, kl_divergence


def main():
    torch.manual_seed(0)
    flips = torch.tensor([1.0] * 14 + [0.0] * 6)
    log_ab = torch.zeros(2, requires_grad=True)  # a = b = 1
    optimizer = torch.optim.Adam([log_ab], lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=150, gamma=0.3)
    prior = Beta(torch.tensor(1.0), torch.tensor(1.0))
    for step in range(450):
        a, b = log_ab.exp()
        q = Beta(a, b)
        p = q.rsample((64,))
        log_lik = Bernoulli(probs=p.unsqueeze(-1)).log_prob(flips).sum(-1).mean()
        elbo = log_lik - kl_divergence(q, prior)
        optimizer.zero_grad()
        (-elbo).backward()
        optimizer.step()
        scheduler.step()
        if step % 150 == 0:
            print(step, "elbo", elbo.item())
    a, b = log_ab.exp().tolist()
    print(f"q = Beta({a:.2f}, {b:.2f}); exact posterior Beta(15, 7)")
    return {"a": a, "b": b, "mean": a / (a + b)}
