"""PyTorch's examples/vision_transformer/main.py: patches cut by ``unfold`` twice,
permute, contiguous and view; a Linear projection, a class token and a positional
embedding (both Parameters of the batch's size, as the example makes them); encoder
blocks of LayerNorm, nn.MultiheadAttention, GELU MLPs and residual adds; an MLP head
on the class token; Adam with weight decay and CrossEntropyLoss; the best weights
saved by torch.save. On the 8x8 digits (``DATA``, given by the test; 4x4 patches of
one channel) instead of CIFAR-10 resized to 224, a narrow and shallow model, a higher
learning rate and less weight decay (the example's README reports that its defaults
do not learn), ``batch_first=True`` for the attention (the example passes it (batch,
patches, latent) without, so it attends across the batch and the class token never
sees its image: nothing to learn), the loaders dropping the last partial batch (the
class token has the batch's size), no tqdm, checkpoints in ``OUT`` (set by the
test); the best weights are loaded back into a new model to count its correct
answers."""
import os
import types

import numpy as np
import torch
import torch.nn as nn
from torch import optim
from torch.utils.data import DataLoader, TensorDataset

DATA = None  # (x_train, y_train, x_test, y_test) NumPy arrays, set by the test
OUT = None  # the checkpoints' directory, set by the test
args = types.SimpleNamespace(no_cuda=True, patch_size=4, latent_size=32, n_channels=1,
                             num_heads=4, num_encoders=2, dropout=0.1, img_size=8,
                             num_classes=10, epochs=4, lr=3e-3, weight_decay=1e-4,
                             batch_size=32, dry_run=False, seed=0)


class PatchExtractor(nn.Module):
    def __init__(self, patch_size=16):
        super().__init__()
        self.patch_size = patch_size

    def forward(self, input_data):
        batch_size, channels, height, width = input_data.size()
        assert height % self.patch_size == 0 and width % self.patch_size == 0, \
            f"Input height ({height}) and width ({width}) must be divisible by patch size " \
            f"({self.patch_size})"

        num_patches_h = height // self.patch_size
        num_patches_w = width // self.patch_size
        num_patches = num_patches_h * num_patches_w

        patches = input_data.unfold(2, self.patch_size, self.patch_size). \
            unfold(3, self.patch_size, self.patch_size). \
            permute(0, 2, 3, 1, 4, 5). \
            contiguous(). \
            view(batch_size, num_patches, -1)

        # Expected shape of a patch here is (32, 4, 16)

        return patches


class InputEmbedding(nn.Module):

    def __init__(self, args):
        super(InputEmbedding, self).__init__()
        self.patch_size = args.patch_size
        self.n_channels = args.n_channels
        self.latent_size = args.latent_size
        use_cuda = not args.no_cuda and torch.cuda.is_available()
        self.device = torch.device("cuda" if use_cuda else "cpu")
        self.batch_size = args.batch_size
        self.input_size = self.patch_size * self.patch_size * self.n_channels

        # Linear projection
        self.LinearProjection = nn.Linear(self.input_size, self.latent_size)
        # Class token
        self.class_token = nn.Parameter(
            torch.randn(self.batch_size, 1, self.latent_size).to(self.device))
        # Positional embedding
        self.pos_embedding = nn.Parameter(
            torch.randn(self.batch_size, 1, self.latent_size).to(self.device))

    def forward(self, input_data):
        input_data = input_data.to(self.device)
        # Patchifying the Image
        patchify = PatchExtractor(patch_size=self.patch_size)
        patches = patchify(input_data)

        linear_projection = self.LinearProjection(patches).to(self.device)
        b, n, _ = linear_projection.shape
        linear_projection = torch.cat((self.class_token, linear_projection), dim=1)
        pos_embed = self.pos_embedding[:, :n + 1, :]
        linear_projection += pos_embed

        return linear_projection


class EncoderBlock(nn.Module):

    def __init__(self, args):
        super(EncoderBlock, self).__init__()

        self.latent_size = args.latent_size
        self.num_heads = args.num_heads
        self.dropout = args.dropout
        self.norm = nn.LayerNorm(self.latent_size)
        self.attention = nn.MultiheadAttention(self.latent_size, self.num_heads,
                                               dropout=self.dropout, batch_first=True)
        self.enc_MLP = nn.Sequential(
            nn.Linear(self.latent_size, self.latent_size * 4),
            nn.GELU(),
            nn.Dropout(self.dropout),
            nn.Linear(self.latent_size * 4, self.latent_size),
            nn.Dropout(self.dropout)
        )

    def forward(self, emb_patches):
        first_norm = self.norm(emb_patches)
        attention_out = self.attention(first_norm, first_norm, first_norm)[0]
        first_added = attention_out + emb_patches
        second_norm = self.norm(first_added)
        mlp_out = self.enc_MLP(second_norm)
        output = mlp_out + first_added

        return output


class ViT(nn.Module):
    def __init__(self, args):
        super(ViT, self).__init__()

        self.num_encoders = args.num_encoders
        self.latent_size = args.latent_size
        self.num_classes = args.num_classes
        self.dropout = args.dropout

        self.embedding = InputEmbedding(args)
        # Encoder Stack
        self.encoders = nn.ModuleList([EncoderBlock(args) for _ in range(self.num_encoders)])
        self.MLPHead = nn.Sequential(
            nn.LayerNorm(self.latent_size),
            nn.Linear(self.latent_size, self.latent_size),
            nn.Linear(self.latent_size, self.num_classes),
        )

    def forward(self, test_input):
        enc_output = self.embedding(test_input)
        for enc_layer in self.encoders:
            enc_output = enc_layer(enc_output)

        class_token_embed = enc_output[:, 0]
        return self.MLPHead(class_token_embed)


class TrainEval:

    def __init__(self, args, model, train_dataloader, val_dataloader, optimizer, criterion,
                 device):
        self.model = model
        self.train_dataloader = train_dataloader
        self.val_dataloader = val_dataloader
        self.optimizer = optimizer
        self.criterion = criterion
        self.epoch = args.epochs
        self.device = device
        self.args = args

    def train_fn(self, current_epoch):
        self.model.train()
        total_loss = 0.0
        tk = self.train_dataloader

        for t, data in enumerate(tk):
            images, labels = data
            images, labels = images.to(self.device), labels.to(self.device)
            self.optimizer.zero_grad()
            logits = self.model(images)
            loss = self.criterion(logits, labels)
            loss.backward()
            self.optimizer.step()

            total_loss += loss.item()
            if self.args.dry_run:
                break

        return total_loss / len(self.train_dataloader)

    def eval_fn(self, current_epoch):
        self.model.eval()
        total_loss = 0.0
        tk = self.val_dataloader

        for t, data in enumerate(tk):
            images, labels = data
            images, labels = images.to(self.device), labels.to(self.device)

            logits = self.model(images)
            loss = self.criterion(logits, labels)

            total_loss += loss.item()
            if self.args.dry_run:
                break

        return total_loss / len(self.val_dataloader)

    def train(self):
        best_valid_loss = np.inf
        best_train_loss = np.inf
        for i in range(self.epoch):
            train_loss = self.train_fn(i)
            val_loss = self.eval_fn(i)

            if val_loss < best_valid_loss:
                torch.save(self.model.state_dict(), os.path.join(OUT, "best-weights.pt"))
                print("Saved Best Weights")
                best_valid_loss = val_loss
                best_train_loss = train_loss
        print(f"Training Loss : {best_train_loss}")
        print(f"Valid Loss : {best_valid_loss}")
        return best_train_loss, best_valid_loss


def main():
    torch.manual_seed(args.seed)
    use_cuda = not args.no_cuda and torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")

    # the digits as (N, 1, 8, 8) images in [0, 1], as ToTensor gives
    x_train, y_train, x_test, y_test = DATA
    train_data = TensorDataset(torch.tensor(x_train).view(-1, 1, 8, 8), torch.tensor(y_train))
    valid_data = TensorDataset(torch.tensor(x_test).view(-1, 1, 8, 8), torch.tensor(y_test))
    train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=True,
                              drop_last=True)
    valid_loader = DataLoader(valid_data, batch_size=args.batch_size, shuffle=True,
                              drop_last=True)

    model = ViT(args).to(device)

    optimizer = optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    criterion = nn.CrossEntropyLoss()

    best_train_loss, best_valid_loss = TrainEval(args, model, train_loader, valid_loader,
                                                 optimizer, criterion, device).train()

    # the best weights loaded back into a new model: its accuracy on the batches
    best = ViT(args).to(device)
    best.load_state_dict(torch.load(os.path.join(OUT, "best-weights.pt")))
    best.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in valid_loader:
            correct += (best(images).argmax(dim=1) == labels).sum().item()
            total += len(labels)
    return {"train_loss": best_train_loss, "valid_loss": best_valid_loss,
            "accuracy": correct / total, "n_params": sum(p.numel() for p in best.parameters()),
            "patches": tuple(PatchExtractor(4)(torch.zeros(2, 1, 8, 8)).shape)}
