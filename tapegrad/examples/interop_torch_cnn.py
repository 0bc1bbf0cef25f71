"""Train the digits CNN in PyTorch, with tapegrad's ``conv2d`` and ``max_pool2d``.

    python -m tapegrad.examples.interop_torch_cnn [--epochs N]

``tapegrad.interop.torch_ops()`` exports every registered op as a function of
torch.Tensors: the kernels run on the tensors' own memory and write into memory
PyTorch allocated, and PyTorch's autograd differentiates them (their backward runs
tapegrad's adjoints). Everything else here is plain PyTorch: parameters, the linear
layers, the loss, the optimizer. Ends by printing ``test accuracy: 0.XXX`` and the
accuracy of the same model built from PyTorch's own conv2d/max_pool2d.
"""
import argparse

import torch

from tapegrad.examples.digits import load_data
from tapegrad.interop import torch_ops


class DigitsCNN(torch.nn.Module):
    """1x8x8 -> conv 32 -> relu -> pool -> conv 64 -> relu -> pool -> 128 -> 10."""

    def __init__(self, ops=None):
        super().__init__()
        self.ops = ops  # tapegrad's exported ops, or None for PyTorch's own
        self.c1 = torch.nn.Conv2d(1, 32, 3, padding=1)
        self.c2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.f1 = torch.nn.Linear(256, 128)
        self.f2 = torch.nn.Linear(128, 10)

    def conv(self, x, layer):
        if self.ops is None:
            return torch.nn.functional.conv2d(x, layer.weight, layer.bias, padding=1)
        return self.ops.conv2d(x, layer.weight, layer.bias, padding=1)

    def pool(self, x):
        if self.ops is None:
            return torch.nn.functional.max_pool2d(x, 2)
        return self.ops.max_pool2d(x, 2)

    def forward(self, x):
        x = x.reshape(-1, 1, 8, 8)
        x = self.pool(torch.relu(self.conv(x, self.c1)))
        x = self.pool(torch.relu(self.conv(x, self.c2)))
        return self.f2(torch.relu(self.f1(x.flatten(1))))


def train(model, data, epochs, seed=0):
    xtr, ytr, xte, yte = (torch.from_numpy(a) for a in data)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(seed)
    for epoch in range(epochs):
        order = torch.randperm(len(xtr), generator=g)
        total = 0.0
        for i in range(0, len(xtr), 64):
            idx = order[i:i + 64]
            loss = torch.nn.functional.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        print(f"epoch {epoch + 1}: loss {total / len(xtr):.4f}")
    with torch.no_grad():
        return float((model(xte).argmax(1) == yte).float().mean())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=8)
    args = p.parse_args(argv)
    data = load_data()
    torch.manual_seed(0)
    ours = DigitsCNN(torch_ops())
    theirs = DigitsCNN()
    theirs.load_state_dict({k: v for k, v in ours.state_dict().items()})
    acc = train(ours, data, args.epochs)
    ref = train(theirs, data, args.epochs)
    print(f"test accuracy: {acc:.3f} (PyTorch's own conv2d/max_pool2d: {ref:.3f})")
    return acc


if __name__ == "__main__":
    main()
