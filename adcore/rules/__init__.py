"""Derivative rules: the scalar table (one rule per line with its math), custom rules
(the EnzymeRules analogue) and the BLAS products as custom rules."""
