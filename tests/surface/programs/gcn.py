"""PyTorch's examples/gcn/main.py (Kipf and Welling's graph convolutional network: the
renormalised adjacency D^-1/2 (A + I) D^-1/2 and the row-normalised features as sparse
COO tensors, torch.mm and torch.spmm with a sparse left operand, Adam with weight
decay, NLLLoss on masked nodes). On a generated citation-like graph written in Cora's
file format (``DATA``: the directory holding cora.content and cora.cites, set by the
test) instead of the downloaded Cora, with splits to its size and fewer epochs."""
import os
import time
import types

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import Adam

DATA = None  # the directory holding cora.content and cora.cites, set by the test
args = types.SimpleNamespace(epochs=60, lr=0.01, l2=5e-4, dropout_p=0.5, hidden_dim=16,
                             val_every=20, include_bias=False, device="cpu", dry_run=False,
                             seed=42, n_test=100, n_val=50)


class GraphConv(nn.Module):
    """Graph Convolutional Layer ("Semi-Supervised Classification with Graph
    Convolutional Networks"): H' = f(D^(-1/2) * A * D^(-1/2) * H * W)."""
    def __init__(self, input_dim, output_dim, use_bias=False):
        super(GraphConv, self).__init__()

        # Initialize the weight matrix W (in this case called `kernel`)
        self.kernel = nn.Parameter(torch.Tensor(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel)  # Initialize the weights using Xavier initialization

        # Initialize the bias (if use_bias is True)
        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(torch.Tensor(output_dim))
            nn.init.zeros_(self.bias)  # Initialize the bias to zeros

    def forward(self, input_tensor, adj_mat):
        support = torch.mm(input_tensor, self.kernel)  # input times the weight matrix
        output = torch.spmm(adj_mat, support)  # the sparse adjacency times the support
        # Add the bias (if bias is not None)
        if self.bias is not None:
            output = output + self.bias

        return output


class GCN(nn.Module):
    """Two graph convolutional layers, ReLU and dropout between them, log-softmax out."""
    def __init__(self, input_dim, hidden_dim, output_dim, use_bias=True, dropout_p=0.1):
        super(GCN, self).__init__()

        # Define the Graph Convolution layers
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)

        # Define the dropout layer
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input_tensor, adj_mat):
        # Perform the first graph convolutional layer
        x = self.gc1(input_tensor, adj_mat)
        x = F.relu(x)  # Apply ReLU activation function
        x = self.dropout(x)  # Apply dropout regularization

        # Perform the second graph convolutional layer
        x = self.gc2(x, adj_mat)

        # Apply log-softmax activation function for classification
        return F.log_softmax(x, dim=1)


def load_cora(path='./cora', device='cpu'):
    """The row-normalised features, the labels, and the renormalised adjacency
    D^(-1/2) (A + I) D^(-1/2), each as the example builds them."""

    # Set the paths to the data files
    content_path = os.path.join(path, 'cora.content')
    cites_path = os.path.join(path, 'cora.cites')

    # Load data from files
    content_tensor = np.genfromtxt(content_path, dtype=np.dtype(str))
    cites_tensor = np.genfromtxt(cites_path, dtype=np.int32)

    # Process features
    features = torch.FloatTensor(content_tensor[:, 1:-1].astype(np.int32))  # feature values
    scale_vector = torch.sum(features, dim=1)  # Compute sum of features for each node
    scale_vector = 1 / scale_vector  # Compute reciprocal of the sums
    scale_vector[scale_vector == float('inf')] = 0  # Handle division by zero cases
    scale_vector = torch.diag(scale_vector).to_sparse()  # a sparse diagonal matrix
    features = scale_vector @ features  # Scale the features using the scale vector

    # Process labels
    classes, labels = np.unique(content_tensor[:, -1], return_inverse=True)  # label indices
    labels = torch.LongTensor(labels)  # Convert labels to a tensor

    # Process adjacency matrix
    idx = content_tensor[:, 0].astype(np.int32)  # Extract node indices
    idx_map = {id: pos for pos, id in enumerate(idx)}  # map indices to positions

    # Map node indices to positions in the adjacency matrix
    edges = np.array(
        list(map(lambda edge: [idx_map[edge[0]], idx_map[edge[1]]],
                 cites_tensor)), dtype=np.int32)

    V = len(idx)  # Number of nodes
    E = edges.shape[0]  # Number of edges
    # the initial adjacency matrix as a sparse tensor
    adj_mat = torch.sparse_coo_tensor(edges.T, torch.ones(E), (V, V), dtype=torch.int64)
    adj_mat = torch.eye(V) + adj_mat  # Add self-loops to the adjacency matrix

    degree_mat = torch.sum(adj_mat, dim=1)  # the degree of each row
    degree_mat = torch.sqrt(1 / degree_mat)  # the reciprocal square root of the degrees
    degree_mat[degree_mat == float('inf')] = 0  # Handle division by zero cases
    degree_mat = torch.diag(degree_mat).to_sparse()  # a sparse diagonal matrix

    adj_mat = degree_mat @ adj_mat @ degree_mat  # Apply the renormalization trick

    return features.to_sparse().to(device), labels.to(device), adj_mat.to_sparse().to(device)


def train_iter(epoch, model, optimizer, criterion, input, target, mask_train, mask_val,
               print_every=10):
    start_t = time.time()
    model.train()
    optimizer.zero_grad()

    # Forward pass
    output = model(*input)
    loss = criterion(output[mask_train], target[mask_train])  # the loss on the training mask

    loss.backward()
    optimizer.step()

    # Evaluate the model performance on training and validation sets
    loss_train, acc_train = test(model, criterion, input, target, mask_train)
    loss_val, acc_val = test(model, criterion, input, target, mask_val)

    if epoch % print_every == 0:
        # Print the training progress at specified intervals
        print(f'Epoch: {epoch:04d} ({(time.time() - start_t):.4f}s) loss_train: '
              f'{loss_train:.4f} acc_train: {acc_train:.4f} loss_val: {loss_val:.4f} '
              f'acc_val: {acc_val:.4f}')
    return loss_train, acc_train, loss_val, acc_val


def test(model, criterion, input, target, mask):
    model.eval()
    with torch.no_grad():
        output = model(*input)
        output, target = output[mask], target[mask]

        loss = criterion(output, target)
        acc = (output.argmax(dim=1) == target).float().sum() / len(target)
    return loss.item(), acc.item()


def main():
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    print(f'Using {device} device')

    print('Loading dataset...')
    features, labels, adj_mat = load_cora(DATA, device=device)
    idx = torch.randperm(len(labels)).to(device)
    n_test, n_val = args.n_test, args.n_test + args.n_val
    idx_test, idx_val, idx_train = idx[:n_test], idx[n_test:n_val], idx[n_val:]

    gcn = GCN(features.shape[1], args.hidden_dim, labels.max().item() + 1, args.include_bias,
              args.dropout_p).to(device)
    optimizer = Adam(gcn.parameters(), lr=args.lr, weight_decay=args.l2)
    criterion = nn.NLLLoss()

    for epoch in range(args.epochs):
        train_iter(epoch + 1, gcn, optimizer, criterion, (features, adj_mat), labels, idx_train,
                   idx_val, args.val_every)
        if args.dry_run:
            break

    loss_test, acc_test = test(gcn, criterion, (features, adj_mat), labels, idx_test)
    print(f'Test set results: loss {loss_test:.4f} accuracy {acc_test:.4f}')
    return {"test_loss": loss_test, "test_accuracy": acc_test,
            "n_classes": labels.max().item() + 1, "features_sparse": features.is_sparse,
            "adj_sparse": adj_mat.is_sparse, "adj_row_sum_0": adj_mat.to_dense()[0].sum().item()}
