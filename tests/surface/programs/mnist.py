"""PyTorch's examples/mnist/main.py (the basic example: two Conv2d layers, max_pool2d,
Dropout, two Linear layers, log_softmax; Adadelta with StepLR; the train and test
loops). On the 8x8 digits (``DATA``, given by the test, through TensorDataset and
DataLoader) instead of MNIST, so fc1 takes the 2x2 pooled maps, with narrower
convolutions and fewer epochs; ``args`` as the example's argparse defaults otherwise."""
import types

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

DATA = None  # (x_train, y_train, x_test, y_test) NumPy arrays, set by the test
args = types.SimpleNamespace(batch_size=64, test_batch_size=1000, epochs=3, lr=1.0,
                             gamma=0.7, dry_run=False, seed=1, log_interval=10,
                             save_model=False)


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))
            if args.dry_run:
                break


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)

    print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'.format(
        test_loss, correct, len(test_loader.dataset),
        100. * correct / len(test_loader.dataset)))
    return test_loss, correct / len(test_loader.dataset)


def main():
    torch.manual_seed(args.seed)
    device = torch.device("cpu")

    train_kwargs = {'batch_size': args.batch_size, 'shuffle': True}
    test_kwargs = {'batch_size': args.test_batch_size}

    # data loading: the digits as (N, 1, 8, 8) images, normalized as the example's
    # transform (ToTensor, then Normalize((0.1307,), (0.3081,))) does
    x_train, y_train, x_test, y_test = DATA
    dataset1 = TensorDataset((torch.tensor(x_train).view(-1, 1, 8, 8) - 0.1307) / 0.3081,
                             torch.tensor(y_train))
    dataset2 = TensorDataset((torch.tensor(x_test).view(-1, 1, 8, 8) - 0.1307) / 0.3081,
                             torch.tensor(y_test))
    train_loader = torch.utils.data.DataLoader(dataset1, **train_kwargs)
    test_loader = DataLoader(dataset2, **test_kwargs)

    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test_loss, accuracy = test(model, device, test_loader)
        scheduler.step()

    if args.save_model:
        torch.save(model.state_dict(), "mnist_cnn.pt")
    return {"test_loss": test_loss, "accuracy": accuracy,
            "lr": optimizer.param_groups[0]["lr"]}
