"""Fit y = sin(x) with a third-order polynomial: nn.Sequential(Linear, Flatten), MSELoss
(sum) and RMSprop, as PyTorch's "polynomial_optim" tutorial."""
import math

import torch


def main():
    torch.manual_seed(0)
    x = torch.linspace(-math.pi, math.pi, 2000)
    y = torch.sin(x)
    p = torch.tensor([1, 2, 3])
    xx = x.unsqueeze(-1).pow(p)

    model = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0, 1))
    loss_fn = torch.nn.MSELoss(reduction="sum")
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    for t in range(1500):
        y_pred = model(xx)
        loss = loss_fn(y_pred, y)
        if t % 500 == 99:
            print(t, loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    linear_layer = model[0]
    print(f"Result: y = {linear_layer.bias.item()} + {linear_layer.weight[:, 0].item()} x + "
          f"{linear_layer.weight[:, 1].item()} x^2 + {linear_layer.weight[:, 2].item()} x^3")
    return {"loss": loss.item(), "x3": linear_layer.weight[:, 2].item()}
