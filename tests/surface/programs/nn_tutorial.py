"""PyTorch's tutorial "What is torch.nn really?" (beginner/nn_tutorial.py), step by
step: logistic regression from raw tensors (hand-written log_softmax and nll, SGD under
no_grad), then F.cross_entropy, nn.Module with nn.Parameter, nn.Linear, optim.SGD,
TensorDataset, DataLoader with a validation set, fit/get_data/get_model, a CNN, and
nn.Sequential with a Lambda layer, WrappedDataLoader and AdaptiveAvgPool2d. On the
8x8 digits (``DATA``, given by the test) instead of MNIST: 64 pixels, 8x8 images."""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

DATA = None  # (x_train, y_train, x_valid, y_valid) NumPy arrays, set by the test
bs = 64  # batch size
lr = 0.5  # learning rate
epochs = 2  # how many epochs to train for
dev = torch.device("cpu")


def log_softmax(x):
    return x - x.exp().sum(-1).log().unsqueeze(-1)


def nll(input, target):
    return -input[range(target.shape[0]), target].mean()


def accuracy(out, yb):
    preds = torch.argmax(out, dim=1)
    return (preds == yb).float().mean()


class Mnist_Logistic(nn.Module):
    def __init__(self):
        super().__init__()
        self.weights = nn.Parameter(torch.randn(64, 10) / math.sqrt(64))
        self.bias = nn.Parameter(torch.zeros(10))

    def forward(self, xb):
        return xb @ self.weights + self.bias


class Mnist_Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 10)

    def forward(self, xb):
        return self.lin(xb)


class Mnist_CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1)

    def forward(self, xb):
        xb = xb.view(-1, 1, 8, 8)
        xb = F.relu(self.conv1(xb))
        xb = F.relu(self.conv2(xb))
        xb = F.relu(self.conv3(xb))
        xb = F.avg_pool2d(xb, 1)
        return xb.view(-1, xb.size(1))


class Lambda(nn.Module):
    def __init__(self, func):
        super().__init__()
        self.func = func

    def forward(self, x):
        return self.func(x)


def preprocess(x, y):
    return x.view(-1, 1, 8, 8).to(dev), y.to(dev)


class WrappedDataLoader:
    def __init__(self, dl, func):
        self.dl = dl
        self.func = func

    def __len__(self):
        return len(self.dl)

    def __iter__(self):
        for b in self.dl:
            yield (self.func(*b))


loss_func = F.cross_entropy


def loss_batch(model, loss_func, xb, yb, opt=None):
    loss = loss_func(model(xb), yb)

    if opt is not None:
        loss.backward()
        opt.step()
        opt.zero_grad()

    return loss.item(), len(xb)


def fit(epochs, model, loss_func, opt, train_dl, valid_dl):
    for epoch in range(epochs):
        model.train()
        for xb, yb in train_dl:
            loss_batch(model, loss_func, xb, yb, opt)

        model.eval()
        with torch.no_grad():
            losses, nums = zip(
                *[loss_batch(model, loss_func, xb, yb) for xb, yb in valid_dl]
            )
        val_loss = np.sum(np.multiply(losses, nums)) / np.sum(nums)

        print(epoch, val_loss)
    return val_loss


def get_data(train_ds, valid_ds, bs):
    return (
        DataLoader(train_ds, batch_size=bs, shuffle=True),
        DataLoader(valid_ds, batch_size=bs * 2),
    )


def main():
    torch.manual_seed(0)
    results = {}
    x_train, y_train, x_valid, y_valid = map(torch.tensor, DATA)
    n, c = x_train.shape
    print(x_train, y_train)
    print(x_train.shape)
    print(y_train.min(), y_train.max())

    # Neural net from scratch (without torch.nn)
    weights = torch.randn(64, 10) / math.sqrt(64)
    weights.requires_grad_()
    bias = torch.zeros(10, requires_grad=True)

    def model(xb):
        return log_softmax(xb @ weights + bias)

    xb = x_train[0:bs]  # a mini-batch from x
    preds = model(xb)  # predictions
    print(preds[0], preds.shape)
    loss_func = nll
    yb = y_train[0:bs]
    print(loss_func(preds, yb))
    print(accuracy(preds, yb))

    for epoch in range(epochs):
        for i in range((n - 1) // bs + 1):
            start_i = i * bs
            end_i = start_i + bs
            xb = x_train[start_i:end_i]
            yb = y_train[start_i:end_i]
            pred = model(xb)
            loss = loss_func(pred, yb)

            loss.backward()
            with torch.no_grad():
                weights -= weights.grad * lr
                bias -= bias.grad * lr
                weights.grad.zero_()
                bias.grad.zero_()

    print(loss_func(model(xb), yb), accuracy(model(xb), yb))
    results["scratch_valid_loss"] = loss_func(model(x_valid), y_valid).item()
    results["scratch_valid_accuracy"] = accuracy(model(x_valid), y_valid).item()

    # Using torch.nn.functional: the same model's loss through F.cross_entropy
    loss_func = F.cross_entropy

    def model(xb):
        return xb @ weights + bias

    results["cross_entropy_matches"] = abs(
        loss_func(model(x_valid), y_valid).item() - results["scratch_valid_loss"])

    # Refactor using nn.Module, then nn.Linear, then optim, Dataset and DataLoader
    def get_model_logistic():
        model = Mnist_Logistic()
        return model, optim.SGD(model.parameters(), lr=lr)

    model = Mnist_Logistic()

    def fit_plain():
        for epoch in range(epochs):
            for i in range((n - 1) // bs + 1):
                start_i = i * bs
                end_i = start_i + bs
                xb = x_train[start_i:end_i]
                yb = y_train[start_i:end_i]
                pred = model(xb)
                loss = loss_func(pred, yb)

                loss.backward()
                with torch.no_grad():
                    for p in model.parameters():
                        p -= p.grad * lr
                    model.zero_grad()

    fit_plain()
    results["module_valid_loss"] = loss_func(model(x_valid), y_valid).item()

    model = Mnist_Linear()
    fit_plain()
    results["linear_valid_loss"] = loss_func(model(x_valid), y_valid).item()

    model, opt = get_model_logistic()
    train_ds = TensorDataset(x_train, y_train)
    valid_ds = TensorDataset(x_valid, y_valid)
    for epoch in range(epochs):
        for i in range((n - 1) // bs + 1):
            xb, yb = train_ds[i * bs: i * bs + bs]
            pred = model(xb)
            loss = loss_func(pred, yb)

            loss.backward()
            opt.step()
            opt.zero_grad()
    results["dataset_valid_loss"] = loss_func(model(x_valid), y_valid).item()

    train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
    model, opt = get_model_logistic()
    results["fit_valid_loss"] = fit(epochs, model, loss_func, opt, train_dl, valid_dl)

    # Switch to CNN
    cnn_lr = 0.1
    model = Mnist_CNN()
    opt = optim.SGD(model.parameters(), lr=cnn_lr, momentum=0.9)
    results["cnn_valid_loss"] = fit(epochs, model, loss_func, opt, train_dl, valid_dl)

    # nn.Sequential, with a Lambda layer and the data reshaped by WrappedDataLoader
    train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
    train_dl = WrappedDataLoader(train_dl, preprocess)
    valid_dl = WrappedDataLoader(valid_dl, preprocess)
    model = nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        Lambda(lambda x: x.view(x.size(0), -1)),
    )
    model.to(dev)
    opt = optim.SGD(model.parameters(), lr=cnn_lr, momentum=0.9)
    results["sequential_valid_loss"] = fit(epochs, model, loss_func, opt, train_dl, valid_dl)
    with torch.no_grad():
        xb, yb = preprocess(x_valid, y_valid)
        results["sequential_valid_accuracy"] = accuracy(model(xb), yb).item()
    return results
