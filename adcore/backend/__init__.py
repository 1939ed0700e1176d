"""From IR to native code: optimisation and vectorisation, MCJIT, vector math, and the
disk cache of compiled gradients."""
