"""A variational autoencoder on the 8x8 digits (in the spirit of PyTorch's VAE example):
the data come in as a NumPy array (``DATA``, set by the caller) and go through
torch.utils.data's TensorDataset and DataLoader."""
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

DATA = None  # (train, test): float32 arrays of shape (N, 64) in [0, 1]


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 48)
        self.fc21 = nn.Linear(48, 6)
        self.fc22 = nn.Linear(48, 6)
        self.fc3 = nn.Linear(6, 48)
        self.fc4 = nn.Linear(48, 64)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 64))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 64), reduction="sum")
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def main():
    torch.manual_seed(1)
    train, test = DATA
    train_loader = DataLoader(TensorDataset(torch.from_numpy(train)), batch_size=64, shuffle=True)
    test_loader = DataLoader(TensorDataset(torch.from_numpy(test)), batch_size=128)
    model = VAE()
    optimizer = optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(1, 9):
        model.train()
        train_loss = 0
        for batch_idx, (data,) in enumerate(train_loader):
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(data)
            loss = loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            train_loss += loss.item()
            optimizer.step()
        print(f"====> Epoch: {epoch} Average loss: {train_loss / len(train_loader.dataset):.4f}")
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for (data,) in test_loader:
            recon, mu, logvar = model(data)
            test_loss += loss_function(recon, data, mu, logvar).item()
    test_loss /= len(test_loader.dataset)
    print(f"====> Test set loss: {test_loss:.4f}")
    return {"train_loss": train_loss / len(train_loader.dataset), "test_loss": test_loss,
            "n_test": int(np.asarray(test).shape[0])}
