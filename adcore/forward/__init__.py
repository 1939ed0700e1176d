"""Forward mode: tangent functions, ``autodiff(Forward, ...)``, jacobians and
second derivatives."""
