"""What adcore.tape refuses: UnsupportedError naming the numpy function, never an untracked
result (a silent zero gradient)."""
import numpy as np
import pytest

from adcore import UnsupportedError, tape
from adcore.tape.numpy_api import PLAIN_UFUNCS

rng = np.random.default_rng(5)
X = rng.uniform(0.2, 0.9, 4)
Z = X + 1j * rng.uniform(0.2, 0.9, 4)

REFUSED = {
    "numpy.nanmedian": (lambda x: np.nanmedian(x), X),
    "numpy.quantile with method='nearest'": (lambda x: np.quantile(x, 0.3, method="nearest"), X),
    "numpy.unique": (lambda x: np.sum(np.unique(x)), X),
    "numpy.convolve of a complex": (lambda z: np.abs(np.sum(np.convolve(z, z))), Z),
    "numpy.interp with period=": (lambda x: np.sum(np.interp(x, [0.0, 1.0], [1.0, 2.0], period=2.0)), X),
    "numpy.fft.fft": (lambda x: np.sum(np.abs(np.fft.fft(x))), X),
    "numpy.linalg.qr": (lambda x: np.sum(np.linalg.qr(x.reshape(2, 2))[1]), X),
    "numpy.linalg.lstsq": (lambda x: np.sum(np.linalg.lstsq(x.reshape(2, 2), x[:2])[0]), X),
    "numpy.maximum.accumulate": (lambda x: np.sum(np.maximum.accumulate(x)), X),
    "numpy.add.at": (lambda x: np.add.at(x, [0], 1.0), X),
    "numpy.exp with keyword arguments": (lambda x: np.sum(np.exp(x, dtype=np.float32)), X),
    "numpy.sum with dtype": (lambda x: np.sum(x, dtype=np.float32), X),
    "numpy.pad with mode='mean'": (lambda x: np.sum(np.pad(x, 1, mode="mean")), X),
    "numpy.sign of a complex": (lambda z: np.abs(np.sum(np.sign(z))), Z),
    "numpy.fmax with a complex": (lambda z: np.abs(np.sum(np.fmax(z, 0.5))), Z),
    "numpy.clip with a complex": (lambda z: np.abs(np.sum(np.clip(z, 0, 1))), Z),
    "numpy.sigmoid with a complex": (lambda z: np.abs(np.sum(tape.sigmoid(z))), Z),
    "numpy.linalg.cholesky of a complex": (lambda z: np.abs(np.sum(np.linalg.cholesky(np.outer(z, z.conj()) + 4 * np.eye(4)))), Z),
    "numpy.nan_to_num of a complex": (lambda z: np.abs(np.sum(np.nan_to_num(z))), Z),
    "numpy.gradient with tracked spacing": (lambda x: np.sum(np.gradient(x, x[0])), X),
    "numpy.full_like with a tracked fill_value": (lambda x: np.sum(np.full_like(x, x[0])), X),
    "numpy.linspace with axis=1": (lambda x: np.sum(np.linspace(x[:2], x[2:], 3, axis=1)), X),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_refused_function_raises_naming_it(what):
    f, x = REFUSED[what]
    name = what.split(" ")[0]
    with pytest.raises(UnsupportedError, match=name.replace(".", r"\.")):
        tape.gradient(f, x)


def _ufuncs():
    return sorted({u for u in vars(np).values() if isinstance(u, np.ufunc)}, key=lambda u: u.__name__)


@pytest.mark.parametrize("ufunc", _ufuncs(), ids=lambda u: u.__name__)
def test_no_ufunc_drops_the_path(ufunc):
    """Every numpy ufunc on a tracked float or complex value is recorded, refused, or is one
    whose derivative is zero almost everywhere (comparisons, rounding, ...), never dropped."""
    for x in (X, Z):
        def f(a):
            out = ufunc(*([a] * ufunc.nin))
            outs = out if isinstance(out, tuple) else (out,)
            results.extend(outs)
            return np.sum(np.real(outs[0])) if type(outs[0]) is tape.Tracked else 0.0
        results = []
        try:
            tape.gradient(f, x)
        except UnsupportedError as e:
            assert ufunc.__name__ in str(e)
            continue
        except (TypeError, ValueError):  # numpy itself rejects the operand types
            continue
        tracked = [type(r) is tape.Tracked for r in results]
        assert all(tracked) or ufunc in PLAIN_UFUNCS, ufunc.__name__


def test_in_place_and_out_arguments_still_refused():
    with pytest.raises(UnsupportedError, match="out="):
        tape.gradient(lambda x: np.sum(np.exp(x, out=np.zeros(4))), X)


def test_the_three_programs_of_the_issue():
    x = np.array([0.3, -1.2, 0.5])
    g, = tape.gradient(lambda a: np.sum(np.sin(np.real(a + 1.0j))), x)
    np.testing.assert_allclose(g, np.cos(x))
    assert tape.gradient(lambda a: np.power(a, 0.0), 0.0) == (0.0,)
    assert tape.gradient(lambda a: np.std(a), 3.5) == (0.0,)
    g, = tape.gradient(lambda a: np.std(a), np.full(3, 2.0))
    np.testing.assert_array_equal(g, 0.0)
    g, = tape.gradient(lambda a: np.sum(np.power(a, np.array([0.0, 2.0, 0.0]))), np.zeros(3))
    np.testing.assert_array_equal(g, 0.0)
