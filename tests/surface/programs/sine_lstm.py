"""Predict sine waves one step ahead with an LSTM (in the spirit of PyTorch's
time_sequence_prediction example, with nn.LSTM and Adam)."""
import torch
import torch.nn as nn


class Sequence(nn.Module):
    def __init__(self, hidden=24):
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, batch_first=True)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, input):
        out, _ = self.lstm(input.unsqueeze(-1))
        return self.linear(out).squeeze(-1)


def waves(n, length, generator_offset):
    t = torch.arange(length, dtype=torch.float32)
    phase = torch.rand(n, 1) * 40 + generator_offset
    return torch.sin((t + phase) / 6.0)


def main():
    torch.manual_seed(0)
    data = waves(48, 41, 0.0)
    test = waves(16, 41, 3.0)
    inp, target = data[:, :-1], data[:, 1:]
    seq = Sequence()
    criterion = nn.MSELoss()
    optimizer = torch.optim.Adam(seq.parameters(), lr=0.02)
    for step in range(80):
        optimizer.zero_grad()
        loss = criterion(seq(inp), target)
        loss.backward()
        optimizer.step()
        if step % 40 == 0:
            print("step", step, "loss", loss.item())
    with torch.no_grad():
        pred = seq(test[:, :-1])
        test_loss = criterion(pred[:, 5:], test[:, 6:])
    print("test loss:", test_loss.item())
    return {"train_loss": loss.item(), "test_loss": test_loss.item()}
