"""Printing follows Flux's show (the examples of the Flux docs)."""
import numpy as np

from layers import Chain, Dense, Embedding, sigmoid, softmax, relu, tanh, only


def test_docs_model_zoo_example():
    model = Chain(Dense(28 ** 2, 32, sigmoid), Dense(32, 10), softmax)
    assert repr(model) == (
        "Chain(\n"
        "  Dense(784 => 32, σ),                  # 25_120 parameters\n"
        "  Dense(32 => 10),                      # 330 parameters\n"
        "  softmax,\n"
        ")                   # Total: 4 arrays, 25_450 parameters, 99.414 KiB.")
    assert str(model) == repr(model)


def test_single_layer_and_small_chain():
    assert repr(Dense(784, 32, sigmoid)) == "Dense(784 => 32, σ)  # 25_120 parameters"
    assert repr(Dense(2, 3)) == "Dense(2 => 3)       # 9 parameters"
    assert repr(Chain(Dense(np.array([[3.0]])))) == (   # the docs: no total for two arrays
        "Chain(\n"
        "  Dense(1 => 1),                        # 2 parameters\n"
        ")")


def test_seed_model_nested_and_named():
    seed = Chain(Dense(1, 23, tanh), Dense(23, 1, bias=False), only)
    assert repr(seed) == (
        "Chain(\n"
        "  Dense(1 => 23, tanh),                 # 46 parameters\n"
        "  Dense(23 => 1; bias=False),           # 23 parameters\n"
        "  only,\n"
        ")                   # Total: 3 arrays, 69 parameters, 276 bytes.")
    nested = Chain(Dense(2, 3, relu), Chain(Dense(3, 4), Dense(4, 2)))
    assert repr(nested) == (
        "Chain(\n"
        "  Dense(2 => 3, relu),                  # 9 parameters\n"
        "  Chain(\n"
        "    Dense(3 => 4),                      # 16 parameters\n"
        "    Dense(4 => 2),                      # 10 parameters\n"
        "  ),\n"
        ")                   # Total: 6 arrays, 35 parameters, 140 bytes.")
    named = Chain(enc=Embedding(1000, 16), dec=Dense(16, 2, dtype=np.float64))
    assert repr(named) == (
        "Chain(\n"
        "  enc = Embedding(1000 => 16),          # 16_000 parameters\n"
        "  dec = Dense(16 => 2),                 # 34 parameters\n"
        ")                   # Total: 3 arrays, 16_034 parameters, 62.766 KiB.")
