"""PyTorch's examples/gat/main.py (Velickovic et al.'s graph attention network: per
head, the scores LeakyReLU(a^T [W h_i || W h_j]) by a broadcast add and ``.mT``, the
non-edges masked by torch.where before the softmax, dropout on the attention, the
heads averaged or concatenated; Adam with weight decay, NLLLoss on masked nodes). On
a generated citation-like graph written in Cora's file format (``DATA``: the directory
holding cora.content and cora.cites, set by the test) instead of the downloaded Cora,
with splits to its size, a narrower hidden layer and fewer epochs."""
import os
import time
import types

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import Adam

DATA = None  # the directory holding cora.content and cora.cites, set by the test
args = types.SimpleNamespace(epochs=40, lr=0.005, l2=5e-4, dropout_p=0.6, hidden_dim=16,
                             num_heads=4, concat_heads=False, val_every=20, dry_run=False,
                             seed=13, n_test=100, n_val=50)


class GraphAttentionLayer(nn.Module):
    """
    Graph Attention Layer (GAT) as described in the paper "Graph Attention Networks":

        e_ij = a(W h_i, W h_j)
        alpha_ij = softmax_j(e_ij)
        h_i' = sigma(sum_j(alpha_ij W h_j))
    """
    def __init__(self, in_features: int, out_features: int, n_heads: int, concat: bool = False,
                 dropout: float = 0.4, leaky_relu_slope: float = 0.2):
        super(GraphAttentionLayer, self).__init__()

        self.n_heads = n_heads  # Number of attention heads
        self.concat = concat  # wether to concatenate the final attention heads
        self.dropout = dropout  # Dropout rate

        if concat:  # concatenating the attention heads
            self.out_features = out_features  # Number of output features per node
            assert out_features % n_heads == 0  # out_features is a multiple of n_heads
            self.n_hidden = out_features // n_heads
        else:  # averaging output over the attention heads (Used in the main paper)
            self.n_hidden = out_features

        # A shared linear transformation, parametrized by a weight matrix W
        self.W = nn.Parameter(torch.empty(size=(in_features, self.n_hidden * n_heads)))

        # Initialize the attention weights a
        self.a = nn.Parameter(torch.empty(size=(n_heads, 2 * self.n_hidden, 1)))

        self.leakyrelu = nn.LeakyReLU(leaky_relu_slope)  # LeakyReLU activation function
        self.softmax = nn.Softmax(dim=1)  # softmax activation function

        self.reset_parameters()  # Reset the parameters

    def reset_parameters(self):
        """Reinitialize learnable parameters."""
        nn.init.xavier_normal_(self.W)
        nn.init.xavier_normal_(self.a)

    def _get_attention_scores(self, h_transformed: torch.Tensor):
        """The attention scores e_ij = LeakyReLU(a^T [Wh_i || Wh_j]) for all pairs of
        nodes, shape (n_heads, n_nodes, n_nodes)."""
        source_scores = torch.matmul(h_transformed, self.a[:, :self.n_hidden, :])
        target_scores = torch.matmul(h_transformed, self.a[:, self.n_hidden:, :])

        # broadcast add
        # (n_heads, n_nodes, 1) + (n_heads, 1, n_nodes) = (n_heads, n_nodes, n_nodes)
        e = source_scores + target_scores.mT
        return self.leakyrelu(e)

    def forward(self, h: torch.Tensor, adj_mat: torch.Tensor):
        n_nodes = h.shape[0]

        # Apply linear transformation to node feature -> W h
        # output shape (n_nodes, n_hidden * n_heads)
        h_transformed = torch.mm(h, self.W)
        h_transformed = F.dropout(h_transformed, self.dropout, training=self.training)

        # splitting the heads by reshaping the tensor and putting heads dim first
        # output shape (n_heads, n_nodes, n_hidden)
        h_transformed = h_transformed.view(n_nodes, self.n_heads, self.n_hidden).permute(1, 0, 2)

        # getting the attention scores
        # output shape (n_heads, n_nodes, n_nodes)
        e = self._get_attention_scores(h_transformed)

        # Set the attention score for non-existent edges to -9e15 (MASKING NON-EXISTENT EDGES)
        connectivity_mask = -9e16 * torch.ones_like(e)
        e = torch.where(adj_mat > 0, e, connectivity_mask)  # masked attention scores

        # attention coefficients are computed as a softmax over the rows
        attention = F.softmax(e, dim=-1)
        attention = F.dropout(attention, self.dropout, training=self.training)

        # final node embeddings are computed as a weighted average of the neighbours'
        h_prime = torch.matmul(attention, h_transformed)

        # concatenating/averaging the attention heads
        # output shape (n_nodes, out_features)
        if self.concat:
            h_prime = h_prime.permute(1, 0, 2).contiguous().view(n_nodes, self.out_features)
        else:
            h_prime = h_prime.mean(dim=0)

        return h_prime


class GAT(nn.Module):
    """Two Graph Attention Layers: the first followed by an ELU, the second with a
    single attention head, then log-softmax."""
    def __init__(self, in_features, n_hidden, n_heads, num_classes, concat=False, dropout=0.4,
                 leaky_relu_slope=0.2):
        super(GAT, self).__init__()

        # Define the Graph Attention layers
        self.gat1 = GraphAttentionLayer(
            in_features=in_features, out_features=n_hidden, n_heads=n_heads,
            concat=concat, dropout=dropout, leaky_relu_slope=leaky_relu_slope
        )

        self.gat2 = GraphAttentionLayer(
            in_features=n_hidden, out_features=num_classes, n_heads=1,
            concat=False, dropout=dropout, leaky_relu_slope=leaky_relu_slope
        )

    def forward(self, input_tensor: torch.Tensor, adj_mat: torch.Tensor):
        # Apply the first Graph Attention layer
        x = self.gat1(input_tensor, adj_mat)
        x = F.elu(x)  # Apply ELU activation function to the output of the first layer

        # Apply the second Graph Attention layer
        x = self.gat2(x, adj_mat)

        return F.log_softmax(x, dim=1)  # Apply log softmax activation function


def load_cora(path='./cora', device='cpu'):
    """The row-normalised features, the labels, and the adjacency with self-loops
    (dense: the sparse adjacency added to torch.eye)."""

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

    return features.to(device), labels.to(device), adj_mat.to(device)


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
    device = torch.device('cpu')
    print(f'Using {device} device')

    print('Loading dataset...')
    features, labels, adj_mat = load_cora(DATA, device=device)
    # Split the dataset into training, validation, and test sets
    idx = torch.randperm(len(labels)).to(device)
    n_test, n_val = args.n_test, args.n_test + args.n_val
    idx_test, idx_val, idx_train = idx[:n_test], idx[n_test:n_val], idx[n_val:]

    # Create the model
    # The model consists of a 2-layer stack of Graph Attention Layers (GATs).
    gat_net = GAT(
        in_features=features.shape[1],  # Number of input features per node
        n_hidden=args.hidden_dim,  # Output size of the first Graph Attention Layer
        n_heads=args.num_heads,  # Number of attention heads in the first layer
        num_classes=labels.max().item() + 1,  # Number of classes to predict for each node
        concat=args.concat_heads,  # Wether to concatinate attention heads
        dropout=args.dropout_p,  # Dropout rate
        leaky_relu_slope=0.2  # Alpha (slope) of the leaky relu activation
    ).to(device)

    # configure the optimizer and loss function
    optimizer = Adam(gat_net.parameters(), lr=args.lr, weight_decay=args.l2)
    criterion = nn.NLLLoss()

    # Train and evaluate the model
    for epoch in range(args.epochs):
        train_iter(epoch + 1, gat_net, optimizer, criterion, (features, adj_mat), labels,
                   idx_train, idx_val, args.val_every)
        if args.dry_run:
            break
    loss_test, acc_test = test(gat_net, criterion, (features, adj_mat), labels, idx_test)
    print(f'Test set results: loss {loss_test:.4f} accuracy {acc_test:.4f}')
    return {"test_loss": loss_test, "test_accuracy": acc_test,
            "n_classes": labels.max().item() + 1, "adj_sparse": adj_mat.is_sparse,
            "edges": int((adj_mat > 0).sum().item())}
