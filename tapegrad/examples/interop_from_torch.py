"""A PyTorch function inside a tapegrad model, through ``from_torch``.

    python -m tapegrad.examples.interop_from_torch [--epochs N]

``from_torch(fn, name=...)`` registers a function of torch.Tensors as a tapegrad op:
its shape rule comes from running it on meta tensors, its kernel runs on the
tensors' memory through DLPack, and its adjoint (at every order) is
``torch.func.vjp`` of it. Here PyTorch's ``mish`` activation (written in torch) is the
nonlinearity of a tapegrad MLP on the digits; the script checks a gradient against
finite differences, trains, and prints ``test accuracy: 0.XXX``.
"""
import argparse

import numpy as np
import torch

import tapegrad as tg
import tapegrad.nn as nn
import tapegrad.nn.functional as F
from tapegrad.examples.digits import load_data
from tapegrad.interop import from_torch


def torch_mish(x):
    return x * torch.tanh(torch.nn.functional.softplus(x))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    args = p.parse_args(argv)
    mish = from_torch(torch_mish, name="torch_mish")
    x = tg.tensor(np.linspace(-2, 2, 7), requires_grad=True)
    print("gradcheck / gradgradcheck of the imported op:",
          tg.testing.gradcheck(mish, [x]), tg.testing.gradgradcheck(mish, [x]))

    tg.manual_seed(0)
    l1, l2, l3 = nn.Linear(64, 128), nn.Linear(128, 64), nn.Linear(64, 10)
    params = [*l1.parameters(), *l2.parameters(), *l3.parameters()]
    opt = tg.optim.Adam(params, lr=2e-3)
    xtr, ytr, xte, yte = load_data()
    rng = np.random.default_rng(0)
    for epoch in range(args.epochs):
        order = rng.permutation(len(xtr))
        total = 0.0
        for i in range(0, len(xtr), 64):
            idx = order[i:i + 64]
            logits = l3(mish(l2(mish(l1(tg.tensor(xtr[idx]))))))
            loss = F.cross_entropy(logits, tg.tensor(ytr[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        print(f"epoch {epoch + 1}: loss {total / len(xtr):.4f}")
    with tg.no_grad():
        pred = l3(mish(l2(mish(l1(tg.tensor(xte)))))).numpy().argmax(1)
    acc = float((pred == yte).mean())
    print(f"test accuracy: {acc:.3f}")
    tg.ops_registry.unregister("torch_mish")
    return acc


if __name__ == "__main__":
    main()
