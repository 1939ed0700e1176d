"""optim: Optimisers.jl-style rules and state trees for ``layers`` models."""
from .rules import (Rule, Descent, Momentum, Nesterov, RMSProp, Adam, AdamW, AdaGrad,
                    ClipGrad, ClipNorm, WeightDecay, OptimiserChain)
from .state import Leaf, setup, update, adjust, freeze, thaw

__all__ = ["Rule", "Descent", "Momentum", "Nesterov", "RMSProp", "Adam", "AdamW", "AdaGrad",
           "ClipGrad", "ClipNorm", "WeightDecay", "OptimiserChain",
           "Leaf", "setup", "update", "adjust", "freeze", "thaw"]
