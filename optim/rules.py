"""Optimisation rules with Optimisers.jl's names, defaults and update formulas.

A rule holds hyperparameters only.  ``rule.init(x)`` makes the per-array state and
``rule.apply(state, x, g)`` turns the gradient ``g`` (raveled, same dtype as ``x``)
into the step ``x -= g`` in place, through the rule's formula: its ``kernel``, an njit
function written in the class (Optimisers.jl keeps ``init`` and ``apply!`` together) with
the signature ``kernel(x, g, *state, *hyper)`` that overwrites ``g`` with the step and
updates the state arrays in place.  ``rule.steps(state)`` lists the kernel calls, so a
compiled training loop (``layers`` with ``Duplicated``) calls exactly what ``apply``
calls.  ``rule.adjust(**kw)`` returns a copy with new hyperparameters.  The kernels
compute in the precision of the parameters (hyperparameters converted by ``like``, as
Optimisers.jl does) and follow numpy's floating-point rules (a division by zero gives inf
or nan, as in Optimisers.jl), which also lets LLVM vectorise their loops.
"""
import copy
import math
from typing import NamedTuple

import numba
import numba.extending
import numpy as np


def _njit(f):
    return numba.njit(cache=False, nogil=True, error_model="numpy")(f)


def like(a, value):
    """``value`` in the element type of array ``a``: the kernels compute in the precision
    of the parameters, as Optimisers.jl (``T(o.eta)``), PyTorch and optax do (float32
    models take float32 steps, 8 lanes to a 256-bit vector)."""
    return a.dtype.type(value)


@numba.extending.overload(like)
def _like(a, value):
    element = a.dtype
    return lambda a, value: element(value)


_SMALLEST_NORMAL = np.finfo(np.float64).tiny


@numba.njit(inline="always", error_model="numpy")
def power_step(power, base):
    """``power * base`` for a running power of ``base`` (Adam's ``beta^t``), 0.0 once it
    underflows: a running product gets stuck at the least subnormal (its product with
    ``base`` rounds back up to it) and every later product takes the processor's slow path
    for subnormals; ``1 - power`` is 1.0 either way."""
    p = power * base
    return p if p >= _SMALLEST_NORMAL else 0.0


class Step(NamedTuple):
    """One kernel call ``kernel(x, g, *state, *hyper)``; ``check``, when set, names the
    value the kernel returns, which must be finite (``"ClipNorm: the gradient norm"``).
    ``per_element``, for a kernel computing entry ``i`` of ``g`` and of its states from
    entry ``i`` of ``x``, ``g`` and those states alone, says of each state whether it has
    an entry per element (``True``) or is the array's own record, updated without reading
    the arrays (``False``: Adam's powers of beta); ``None`` when entries mix (ClipNorm's
    norm).  A compiled training loop runs a step with ``per_element`` once over all the
    parameters laid end to end."""
    kernel: object
    state: tuple
    hyper: tuple
    check: str = ""
    per_element: tuple = None


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
                raise FloatingPointError(f"{s.check} is {n}")

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

    @staticmethod
    @_njit
    def kernel(x, g, eta):
        eta = like(g, eta)
        for i in range(g.size):
            g[i] = eta * g[i]

    def __init__(self, eta=0.1):
        self.eta = eta

    def steps(self, state):
        return [Step(self.kernel, (), (float(self.eta),), per_element=())]


class Momentum(Rule):
    """``v = rho*v + eta*dx``; step ``v``."""

    hyper = ("eta", "rho")

    @staticmethod
    @_njit
    def kernel(x, g, v, eta, rho):
        eta, rho = like(g, eta), like(g, rho)
        for i in range(g.size):
            v[i] = rho * v[i] + eta * g[i]
            g[i] = v[i]

    def __init__(self, eta=0.01, rho=0.9):
        self.eta, self.rho = eta, rho

    def init(self, x):
        return _zeros(x)

    def steps(self, state):
        return [Step(self.kernel, (state,), (float(self.eta), float(self.rho)),
                     per_element=(True,))]


class Nesterov(Rule):
    """Nesterov momentum: step ``-rho^2*v + (1+rho)*eta*dx``, then ``v = rho*v - eta*dx``."""

    hyper = ("eta", "rho")

    @staticmethod
    @_njit
    def kernel(x, g, v, eta, rho):
        a, b = like(g, -rho * rho), like(g, (1.0 + rho) * eta)
        eta, rho = like(g, eta), like(g, rho)
        for i in range(g.size):
            d = g[i]
            g[i] = a * v[i] + b * d
            v[i] = rho * v[i] - eta * d

    def __init__(self, eta=0.001, rho=0.9):
        self.eta, self.rho = eta, rho

    def init(self, x):
        return _zeros(x)

    def steps(self, state):
        return [Step(self.kernel, (state,), (float(self.eta), float(self.rho)),
                     per_element=(True,))]


class RMSProp(Rule):
    """``q = rho*q + (1-rho)*dx^2``; step ``eta*dx/(sqrt(q)+epsilon)``."""

    hyper = ("eta", "rho", "epsilon")

    @staticmethod
    @_njit
    def kernel(x, g, quad, eta, rho, eps):
        keep, eta, rho, eps = like(g, 1.0 - rho), like(g, eta), like(g, rho), like(g, eps)
        for i in range(g.size):
            d = g[i]
            quad[i] = rho * quad[i] + keep * d * d
            g[i] = d * eta / (math.sqrt(quad[i]) + eps)

    def __init__(self, eta=0.001, rho=0.9, epsilon=1e-8):
        self.eta, self.rho, self.epsilon = eta, rho, epsilon

    def init(self, x):
        return _zeros(x)

    def steps(self, state):
        return [Step(self.kernel, (state,),
                     (float(self.eta), float(self.rho), float(self.epsilon)), per_element=(True,))]


class Adam(Rule):
    """Adam with bias correction; state ``(mt, vt, beta_t)``, ``beta_t`` the powers of ``beta``."""

    hyper = ("eta", "beta", "epsilon")

    @staticmethod
    @_njit
    def kernel(x, g, mt, vt, beta_t, eta, b1, b2, eps):
        """``mt = b1 mt + (1-b1) dx``, ``vt = b2 vt + (1-b2) dx^2``, step
        ``eta mt/c1 / (sqrt(vt/c2) + eps)`` (``c = 1 - beta_t``) computed as
        ``(eta/c1) mt / (sqrt(vt) (1/sqrt(c2)) + eps)``: the scalars taken once (from the
        float64 powers ``beta_t``), one division per element, in ``x``'s precision."""
        step = like(g, eta / (1.0 - beta_t[0]))
        root = like(g, 1.0 / math.sqrt(1.0 - beta_t[1]))
        eps = like(g, eps)
        c1, c2, k1, k2 = like(g, b1), like(g, b2), like(g, 1.0 - b1), like(g, 1.0 - b2)
        for i in range(g.size):
            d = g[i]
            mt[i] = c1 * mt[i] + k1 * d
            vt[i] = c2 * vt[i] + k2 * d * d
            g[i] = step * mt[i] / (math.sqrt(vt[i]) * root + eps)
        beta_t[0] = power_step(beta_t[0], b1)
        beta_t[1] = power_step(beta_t[1], b2)

    def __init__(self, eta=0.001, beta=(0.9, 0.999), epsilon=1e-8):
        self.eta, self.beta, self.epsilon = eta, tuple(beta), epsilon

    def init(self, x):
        return (_zeros(x), _zeros(x), np.array(self.beta, dtype=np.float64))

    def steps(self, state):
        b1, b2 = self.beta
        return [Step(self.kernel, tuple(state), (float(self.eta), float(b1), float(b2),
                                                  float(self.epsilon)),
                     per_element=(True, True, False))]


class AdamW(Adam):
    """Adam with weight decay coupled to the learning rate, as PyTorch's AdamW:
    step ``eta * (adam_step + lambda_ * x)``: Adam's step, then ``WeightDecay``'s kernel
    adding ``(eta lambda_) x``."""

    hyper = ("eta", "beta", "lambda_", "epsilon")

    def __init__(self, eta=0.001, beta=(0.9, 0.999), lambda_=0.0, epsilon=1e-8):
        super().__init__(eta, beta, epsilon)
        self.lambda_ = lambda_

    def steps(self, state):
        return super().steps(state) + [Step(WeightDecay.kernel, (), (float(self.eta * self.lambda_),),
                                            per_element=())]


class AdaGrad(Rule):
    """``acc += dx^2`` (starting at ``epsilon``); step ``eta*dx/(sqrt(acc)+epsilon)``."""

    hyper = ("eta", "epsilon")

    @staticmethod
    @_njit
    def kernel(x, g, acc, eta, eps):
        eta, eps = like(g, eta), like(g, eps)
        for i in range(g.size):
            d = g[i]
            acc[i] += d * d
            g[i] = d * eta / (math.sqrt(acc[i]) + eps)

    def __init__(self, eta=0.1, epsilon=1e-8):
        self.eta, self.epsilon = eta, epsilon

    def init(self, x):
        return np.full(x.size, self.epsilon, dtype=x.dtype)

    def steps(self, state):
        return [Step(self.kernel, (state,), (float(self.eta), float(self.epsilon)),
                     per_element=(True,))]


class ClipGrad(Rule):
    """Clamp each gradient entry to ``[-delta, delta]``."""

    hyper = ("delta",)

    @staticmethod
    @_njit
    def kernel(x, g, delta):
        delta = like(g, delta)
        for i in range(g.size):
            g[i] = min(max(g[i], -delta), delta)

    def __init__(self, delta=10.0):
        self.delta = delta

    def steps(self, state):
        return [Step(self.kernel, (), (float(self.delta),), per_element=())]


class ClipNorm(Rule):
    """Rescale each array's gradient so its ``p``-norm is at most ``omega``; a non-finite
    norm raises ``FloatingPointError`` unless ``throw=False``."""

    hyper = ("omega", "p", "throw")

    @staticmethod
    @_njit
    def kernel(x, g, omega, p):
        """Scale ``g`` so its ``p``-norm is at most ``omega``; returns the norm before."""
        n = 0.0
        if math.isinf(p):
            for i in range(g.size):
                n = max(n, abs(g[i]))
        else:
            for i in range(g.size):
                n += abs(g[i]) ** p
            n = n ** (1.0 / p)
        if n > omega:
            s = omega / n
            for i in range(g.size):
                g[i] = s * g[i]
        return n

    def __init__(self, omega=10.0, p=2.0, throw=True):
        self.omega, self.p, self.throw = omega, p, throw

    def steps(self, state):
        return [Step(self.kernel, (), (float(self.omega), float(self.p)),
                     "ClipNorm: the gradient norm" if self.throw else "")]


class WeightDecay(Rule):
    """Add ``lambda_ * x`` to the gradient (L2 regularisation)."""

    hyper = ("lambda_",)

    @staticmethod
    @_njit
    def kernel(x, g, lam):
        lam = like(g, lam)
        for i in range(g.size):
            g[i] = g[i] + lam * x[i]


    def __init__(self, lambda_=5e-4):
        self.lambda_ = lambda_

    def steps(self, state):
        return [Step(self.kernel, (), (float(self.lambda_),), per_element=())]


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
