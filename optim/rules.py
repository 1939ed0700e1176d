"""Optimisation rules with Optimisers.jl's names, defaults and update formulas.

A rule holds hyperparameters only.  ``rule.init(x)`` makes the per-array state and
``rule.apply(state, x, g)`` turns the gradient ``g`` (raveled, same dtype as ``x``)
into the step ``x -= g`` in place, through the rule's Numba kernels in
``optim.kernels``: ``rule.steps(state)`` lists them, so a compiled training loop
(``layers`` with ``Duplicated``) calls exactly what ``apply`` calls.
``rule.adjust(**kw)`` returns a copy with new hyperparameters.
"""
import copy
from typing import NamedTuple

import numpy as np

from . import kernels


class Step(NamedTuple):
    """One kernel call ``kernel(x, g, *state, *hyper)``; ``check`` marks kernels returning
    a norm that must be finite."""
    kernel: object
    state: tuple
    hyper: tuple
    check: bool = False


class Rule:
    """Base class: subclasses list their hyperparameters in ``hyper`` (constructor order)."""

    hyper = ()

    def init(self, x):
        return None

    def steps(self, state):
        """The kernel calls making up ``apply``, as a list of ``Step``."""
        raise NotImplementedError(f"{type(self).__name__} does not list its kernel steps")

    def apply(self, state, x, g):
        for s in self.steps(state):
            n = s.kernel(x, g, *s.state, *s.hyper)
            if s.check and not np.isfinite(n):
                raise FloatingPointError(f"ClipNorm: the gradient norm is {n}")

    def adjust(self, **kw):
        """A copy with the given hyperparameters replaced; unknown names are ignored."""
        new = copy.copy(self)
        for k, v in kw.items():
            if k in self.hyper:
                setattr(new, k, v)
        return new

    def hyperparameters(self):
        return set(self.hyper)

    def __eq__(self, other):
        return type(self) is type(other) and all(
            getattr(self, k) == getattr(other, k) for k in self.hyper)

    __hash__ = object.__hash__

    def __repr__(self):
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.hyper)
        return f"{type(self).__name__}({args})"


def _zeros(x):
    return np.zeros(x.size, dtype=x.dtype)


class Descent(Rule):
    """Plain gradient descent: ``x -= eta * dx``."""

    hyper = ("eta",)

    def __init__(self, eta=0.1):
        self.eta = eta

    def steps(self, state):
        return [Step(kernels.descent, (), (float(self.eta),))]


class Momentum(Rule):
    """``v = rho*v + eta*dx``; step ``v``."""

    hyper = ("eta", "rho")

    def __init__(self, eta=0.01, rho=0.9):
        self.eta, self.rho = eta, rho

    def init(self, x):
        return _zeros(x)

    def steps(self, state):
        return [Step(kernels.momentum, (state,), (float(self.eta), float(self.rho)))]


class Nesterov(Rule):
    """Nesterov momentum: step ``-rho^2*v + (1+rho)*eta*dx``, then ``v = rho*v - eta*dx``."""

    hyper = ("eta", "rho")

    def __init__(self, eta=0.001, rho=0.9):
        self.eta, self.rho = eta, rho

    def init(self, x):
        return _zeros(x)

    def steps(self, state):
        return [Step(kernels.nesterov, (state,), (float(self.eta), float(self.rho)))]


class RMSProp(Rule):
    """``q = rho*q + (1-rho)*dx^2``; step ``eta*dx/(sqrt(q)+epsilon)``."""

    hyper = ("eta", "rho", "epsilon")

    def __init__(self, eta=0.001, rho=0.9, epsilon=1e-8):
        self.eta, self.rho, self.epsilon = eta, rho, epsilon

    def init(self, x):
        return _zeros(x)

    def steps(self, state):
        return [Step(kernels.rmsprop, (state,),
                     (float(self.eta), float(self.rho), float(self.epsilon)))]


class Adam(Rule):
    """Adam with bias correction; state ``(mt, vt, beta_t)``, ``beta_t`` the powers of ``beta``."""

    hyper = ("eta", "beta", "epsilon")

    def __init__(self, eta=0.001, beta=(0.9, 0.999), epsilon=1e-8):
        self.eta, self.beta, self.epsilon = eta, tuple(beta), epsilon

    def init(self, x):
        return (_zeros(x), _zeros(x), np.array(self.beta, dtype=np.float64))

    def _lambda(self):
        return 0.0

    def steps(self, state):
        b1, b2 = self.beta
        return [Step(kernels.adam, tuple(state), (float(self.eta), float(b1), float(b2),
                                                  float(self.epsilon), float(self._lambda())))]


class AdamW(Adam):
    """Adam with weight decay coupled to the learning rate, as PyTorch's AdamW:
    step ``eta * (adam_step + lambda_ * x)``."""

    hyper = ("eta", "beta", "lambda_", "epsilon")

    def __init__(self, eta=0.001, beta=(0.9, 0.999), lambda_=0.0, epsilon=1e-8):
        super().__init__(eta, beta, epsilon)
        self.lambda_ = lambda_

    def _lambda(self):
        return self.lambda_


class AdaGrad(Rule):
    """``acc += dx^2`` (starting at ``epsilon``); step ``eta*dx/(sqrt(acc)+epsilon)``."""

    hyper = ("eta", "epsilon")

    def __init__(self, eta=0.1, epsilon=1e-8):
        self.eta, self.epsilon = eta, epsilon

    def init(self, x):
        return np.full(x.size, self.epsilon, dtype=x.dtype)

    def steps(self, state):
        return [Step(kernels.adagrad, (state,), (float(self.eta), float(self.epsilon)))]


class ClipGrad(Rule):
    """Clamp each gradient entry to ``[-delta, delta]``."""

    hyper = ("delta",)

    def __init__(self, delta=10.0):
        self.delta = delta

    def steps(self, state):
        return [Step(kernels.clipgrad, (), (float(self.delta),))]


class ClipNorm(Rule):
    """Rescale each array's gradient so its ``p``-norm is at most ``omega``; a non-finite
    norm raises ``FloatingPointError`` unless ``throw=False``."""

    hyper = ("omega", "p", "throw")

    def __init__(self, omega=10.0, p=2.0, throw=True):
        self.omega, self.p, self.throw = omega, p, throw

    def steps(self, state):
        return [Step(kernels.clipnorm, (), (float(self.omega), float(self.p)), bool(self.throw))]


class WeightDecay(Rule):
    """Add ``lambda_ * x`` to the gradient (L2 regularisation)."""

    hyper = ("lambda_",)

    def __init__(self, lambda_=5e-4):
        self.lambda_ = lambda_

    def steps(self, state):
        return [Step(kernels.weightdecay, (), (float(self.lambda_),))]


class OptimiserChain(Rule):
    """Apply ``rules`` in turn to the gradient; the state is the tuple of their states."""

    def __init__(self, *rules):
        self.rules = tuple(rules)

    def init(self, x):
        return tuple(r.init(x) for r in self.rules)

    def steps(self, state):
        return [step for r, s in zip(self.rules, state) for step in r.steps(s)]

    def adjust(self, **kw):
        return OptimiserChain(*(r.adjust(**kw) for r in self.rules))

    def hyperparameters(self):
        return set().union(*(r.hyperparameters() for r in self.rules))

    def __eq__(self, other):
        return type(other) is OptimiserChain and self.rules == other.rules

    __hash__ = object.__hash__

    def __repr__(self):
        return f"OptimiserChain({', '.join(map(repr, self.rules))})"
