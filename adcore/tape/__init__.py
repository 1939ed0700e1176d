"""adcore.tape: reverse-mode AD of plain numpy code by operator overloading.

Usage::

    import numpy as np
    from adcore import tape, Const

    loss = lambda w, x: np.sum(np.tanh(x @ w) ** 2)
    dw, dx = tape.gradient(loss, w, x)            # one gradient per argument
    dw, none = tape.gradient(loss, w, Const(x))   # Const arguments get None
    val, (dw, dx) = tape.withgradient(loss, w, x)

Arguments are trees: float and complex arrays and numbers are differentiated; tuples,
lists, dicts and nodes (objects whose class declares ``__tree_fields__``) are walked;
``Const(...)``, ints, integer/bool arrays and other objects are not.  The gradient
mirrors each argument: an array (same dtype, zeros if unused) per array, a number per
number, a tuple per tuple/list, a dict per dict, a ``{field: gradient}`` dict per node,
``None`` for everything else.  So ``tape.gradient(loss, model, x, y)`` returns
``(model_grad_dict, dx, dy)``.  ``withgradient`` returns ``ValueAndGradient(val, grad)``;
when ``f`` returns a tuple or dict its first element is the loss and ``val`` is the whole
output.  The loss must have exactly one element (else ``ADError``); a complex loss
differentiates its real part.  For complex ``z = x + iy`` the gradient is
``dL/dx - i dL/dy`` (HIPS autograd's and JAX's convention).

Inside ``f`` the leaves are ``Tracked`` values.  Operators, indexing, the common array
methods, numpy functions and ufuncs are recorded: the ops are the keys of ``RULES``
(``rules`` and its topic modules, each rule next to its formula) and the numpy functions
those of ``numpy_api.FUNCTIONS`` (many composed from recorded ops).  Anything else raises
``adcore.UnsupportedError`` naming the numpy function: no path is ever dropped silently.
Comparisons, ``argmax``, ``np.sign``/``floor`` etc. give plain arrays (derivative zero
almost everywhere); ``float(x)`` and ``x.item()`` give plain Python numbers.  While ``f``
runs, ``np.array``/``np.asarray``/``np.r_``/``np.c_`` build tracked arrays from tracked
values, and ``np.sum``/``mean``/``std``/``var``/``prod``/``max``/``min``/``amax``/``amin``/
``linalg.norm`` accept lists of them (``builders``); assigning a tracked value into a plain
array raises, as in autograd; ``tape.primal(x)`` stops the gradient on purpose.  In-place updates
(``x += y``, ``x[i] = v``) of intermediate arrays are recorded functionally; on arguments
of ``f``, views and arrays with views they raise ``UnsupportedError``.  Plain arrays used
as operands are kept by reference until the backward pass: do not modify them in place
inside ``f`` after using them.  float32 stays float32, and so do its gradients.

Stable building blocks, for plain and tracked arrays alike: ``sigmoid``,
``softplus``, ``relu``, ``softmax(x, axis=-1)``, ``logsoftmax(x, axis=-1)``,
``logsumexp(x, axis=None, keepdims=False)``.

The recording is public (for the compiled path): ``rec = tape.record(f, *args)``
gives ``Recording(tape, args, out)``; ``rec.tape.records`` is a list of
``Record(op, inputs, args, out, value, attrs)`` in execution order where ``op``
is a key of ``RULES`` (``"input"`` for leaves, listed in ``rec.tape.inputs``),
``inputs`` the ids of tracked operands (``None`` for constants), ``args`` all
operand values, ``out`` the output id (= index in ``records``) and ``attrs``
the op's options (``axis`` as ``None`` or a sorted tuple of non-negative ints,
``keepdims``, ``shape``, ``axes``, ``index``, ``dtype``).
``rec.tape.backward(out_id, seed)`` returns the adjoints indexed by id.  A tool that
replays a recording sees what leaves it (Python numbers, comparisons, ``argmax``...)
through the hook ``observe.observing(observer)``.
"""
from .api import Recording, ValueAndGradient, gradient, record, withgradient
from .functions import logsoftmax, logsumexp, relu, sigmoid, softmax, softplus
from .recording import Record, Tape
from .rules import RULES
from . import rules_complex, rules_linalg, rules_scan  # noqa: F401  (register their rules in RULES)
from .tracked import Tracked, primal
from .trees import grad_tree, track
from . import numpy_api, numpy_linalg, numpy_shape, numpy_stats  # noqa: F401  (the numpy function table)

__all__ = [
    "gradient", "withgradient", "record", "Recording", "ValueAndGradient",
    "sigmoid", "softplus", "relu", "softmax", "logsoftmax", "logsumexp",
    "Tape", "Record", "Tracked", "RULES", "primal", "track", "grad_tree",
]
