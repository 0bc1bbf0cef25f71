"""PyTorch's examples/mnist_rnn/main.py: an LSTM reads the image row by row, its last
output goes through BatchNorm1d, Dropout2d and two Linear layers; Adadelta with StepLR.
On the 8x8 digits (``DATA``, given by the test, through TensorDataset and DataLoader)
instead of MNIST (so 8 rows of 8 pixels), and fewer epochs; ``args`` as the example's
argparse defaults otherwise."""
import types

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

DATA = None  # (x_train, y_train, x_test, y_test) NumPy arrays, set by the test
args = types.SimpleNamespace(batch_size=64, test_batch_size=1000, epochs=4, lr=0.1,
                             gamma=0.7, dry_run=False, seed=1, log_interval=10,
                             save_model=False)


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.rnn = nn.LSTM(input_size=8, hidden_size=64, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(64)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, input):
        # Shape of input is (batch_size, 1, 8, 8)
        # converting shape of input to (batch_size, 8, 8)
        # as required by RNN when batch_first is set True
        input = input.reshape(-1, 8, 8)
        output, hidden = self.rnn(input)

        # Get last output of RNN
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = self.fc1(output)
        output = F.relu(output)
        output = self.dropout2(output)
        output = self.fc2(output)
        output = F.log_softmax(output, dim=1)
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


def test(args, model, device, test_loader):
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
            if args.dry_run:
                break

    test_loss /= len(test_loader.dataset)

    print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'.format(
        test_loss, correct, len(test_loader.dataset),
        100. * correct / len(test_loader.dataset)))
    return test_loss, correct / len(test_loader.dataset)


def main():
    device = torch.device("cpu")

    torch.manual_seed(args.seed)

    # data loading: the digits as (N, 1, 8, 8) images, normalized as the example's
    # MNIST transform does
    x_train, y_train, x_test, y_test = DATA
    train_set = TensorDataset((torch.tensor(x_train).view(-1, 1, 8, 8) - 0.1307) / 0.3081,
                              torch.tensor(y_train))
    test_set = TensorDataset((torch.tensor(x_test).view(-1, 1, 8, 8) - 0.1307) / 0.3081,
                             torch.tensor(y_test))
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size, shuffle=True)

    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test_loss, accuracy = test(args, model, device, test_loader)
        scheduler.step()

    if args.save_model:
        torch.save(model.state_dict(), "mnist_rnn.pt")
    return {"test_loss": test_loss, "accuracy": accuracy,
            "lr": optimizer.param_groups[0]["lr"]}
