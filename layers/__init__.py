"""layers: Flux-like models (``Dense``, ``Chain``, ``Embedding``, convolution, pooling,
normalisation, dropout, recurrent layers), losses and training.

A model is a tree (``adcore.tree``): layers name their trainable arrays in
``__tree_fields__``, and gradients, optimiser state, printing and saving walk it.
"""
from .activations import (identity, relu, leakyrelu, elu, gelu, swish, softplus, sigmoid, σ,
                          logsigmoid, tanh, softmax, logsoftmax, logsumexp)
from .core import Layer, Dense, Embedding, Chain
from .combinators import SkipConnection, Parallel
from .conv import Conv, MaxPool, MeanPool, GlobalMeanPool, flatten
from .grad import gradient, withgradient, threads
from .init import glorot_uniform
from .io import state, loadmodel, save, load
from .modes import trainmode, testmode
from .normalise import LayerNorm, BatchNorm, Dropout
from .recurrent import RNN, LSTM, GRU
from .losses import (mse, mae, crossentropy, logitcrossentropy, binarycrossentropy,
                     logitbinarycrossentropy, huber_loss, kldivergence)
from .njit_layer import kernel_call
from .train import train, NonFiniteLossError
from .utils import only, onehot, onehotbatch, onecold, f32, f64, destructure, batches

__all__ = [
    "identity", "relu", "leakyrelu", "elu", "gelu", "swish", "softplus", "sigmoid", "σ",
    "logsigmoid", "tanh", "softmax", "logsoftmax", "logsumexp",
    "Layer", "Dense", "Embedding", "Chain", "Conv", "MaxPool", "MeanPool", "GlobalMeanPool",
    "flatten", "LayerNorm", "BatchNorm", "Dropout", "RNN", "LSTM", "GRU", "SkipConnection",
    "Parallel", "trainmode", "testmode", "gradient", "withgradient", "threads", "glorot_uniform",
    "state", "loadmodel", "save", "load",
    "mse", "mae", "crossentropy", "logitcrossentropy", "binarycrossentropy",
    "logitbinarycrossentropy", "huber_loss", "kldivergence",
    "train", "NonFiniteLossError", "kernel_call",
    "only", "onehot", "onehotbatch", "onecold", "f32", "f64", "destructure", "batches",
]
