"""Composite activations declared as scalar expressions (fused by default):
gelu, silu, softplus, logsigmoid, elu, leaky_relu."""
