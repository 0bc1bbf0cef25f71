"""PyTorch's examples/mnist_hogwild (main.py and train.py): processes train one
shared model at once (``model.share_memory()``, Hogwild SGD), then the parent tests
it; on the 8x8 digits (``DATA``, given by the test) instead of MNIST, with a small
MLP and few epochs."""
import os
import types

import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

DATA = None  # (x_train, y_train, x_test, y_test) NumPy arrays, set by the test
args = types.SimpleNamespace(batch_size=32, test_batch_size=200, epochs=4, lr=0.05,
                             momentum=0.5, seed=1, log_interval=20, num_processes=2)


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(64, 64)
        self.dropout = nn.Dropout(0.25)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = self.dropout(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def train(rank, args, model, device, dataset, dataloader_kwargs):
    torch.manual_seed(args.seed + rank)

    train_loader = torch.utils.data.DataLoader(dataset, **dataloader_kwargs)

    optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    for epoch in range(1, args.epochs + 1):
        train_epoch(epoch, args, model, device, train_loader, optimizer)


def test(args, model, device, dataset, dataloader_kwargs):
    torch.manual_seed(args.seed)

    test_loader = torch.utils.data.DataLoader(dataset, **dataloader_kwargs)

    return test_epoch(model, device, test_loader)


def train_epoch(epoch, args, model, device, data_loader, optimizer):
    model.train()
    pid = os.getpid()
    for batch_idx, (data, target) in enumerate(data_loader):
        optimizer.zero_grad()
        output = model(data.to(device))
        loss = F.nll_loss(output, target.to(device))
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print('{}\tTrain Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                pid, epoch, batch_idx * len(data), len(data_loader.dataset),
                100. * batch_idx / len(data_loader), loss.item()))


def test_epoch(model, device, data_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in data_loader:
            output = model(data.to(device))
            # sum up batch loss
            test_loss += F.nll_loss(output, target.to(device), reduction="sum").item()
            pred = output.max(1)[1]  # get the index of the max log-probability
            correct += pred.eq(target.to(device)).sum().item()

    test_loss /= len(data_loader.dataset)
    print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'.format(
        test_loss, correct, len(data_loader.dataset),
        100. * correct / len(data_loader.dataset)))
    return test_loss, correct / len(data_loader.dataset)


def main():
    device = torch.device("cpu")
    # data loading: the digits as TensorDatasets instead of datasets.MNIST
    x_train, y_train, x_test, y_test = DATA
    dataset1 = torch.utils.data.TensorDataset(torch.tensor(x_train), torch.tensor(y_train))
    dataset2 = torch.utils.data.TensorDataset(torch.tensor(x_test), torch.tensor(y_test))
    kwargs = {'batch_size': args.batch_size, 'shuffle': True}

    torch.manual_seed(args.seed)

    model = Net().to(device)
    model.share_memory()  # gradients are allocated lazily, so they are not shared here
    before = [p.detach().clone() for p in model.parameters()]

    processes = []
    for rank in range(args.num_processes):
        p = mp.Process(target=train, args=(rank, args, model, device,
                                           dataset1, kwargs))
        # We first train the model across `num_processes` processes
        p.start()
        processes.append(p)
    for p in processes:
        p.join()

    # Once training is complete, we can test the model
    kwargs['batch_size'] = args.test_batch_size
    test_loss, accuracy = test(args, model, device, dataset2, kwargs)
    moved = sum((p.detach() - b).abs().sum().item() for p, b in zip(model.parameters(), before))
    return {"test_loss": test_loss, "accuracy": accuracy, "moved": moved,
            "exitcodes": [p.exitcode for p in processes]}
