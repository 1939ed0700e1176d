/* C kernels compiled by clang in tests/test_foreign.py (when clang is installed). */
#include <math.h>

/* y[i] = sin(a x[i]); returns sum y[i] x[i] */
double sinsum(const double *x, double *y, int n, double a) {
    double s = 0.0;
    for (int i = 0; i < n; i++) {
        y[i] = sin(a * x[i]);
        s += y[i] * x[i];
    }
    return s;
}

/* y[idx[i]] += a x[i] in single precision */
void scatter_axpy(float a, const float *x, const int *idx, float *y, int n) {
    for (int i = 0; i < n; i++)
        y[idx[i]] += a * x[i];
}

static double activation(double v, int kind) {
    switch (kind) {
    case 0: return tanh(v);
    case 1: return v > 0.0 ? v : 0.01 * v;
    case 2: return log1p(exp(v));
    default: return v;
    }
}

/* Rosenbrock-like energy with early exit on a non-finite term */
double energy(const double *x, int n, int kind) {
    double e = 0.0;
    for (int i = 0; i + 1 < n; i++) {
        double t = activation(x[i], kind);
        double d = x[i + 1] - t * t;
        double term = 100.0 * d * d + pow(1.0 - t, 2.0);
        if (!isfinite(term))
            return -1.0;
        e += term;
    }
    return e;
}

/* explicit heat steps in place, with a while loop on the step count */
void heat(double *u, long n, int steps) {
    while (steps-- > 0) {
        double left = u[0];
        for (long i = 1; i + 1 < n; i++) {
            double c = u[i];
            u[i] = c + 0.2 * (left - 2.0 * c + u[i + 1]) + 0.05 * c * c;
            left = c;
        }
    }
}

/* x[i] = x[i]^2 + 1.5 in single precision: clang -O2 vectorises this loop */
float square_plus(float *x, long n) {
    for (long i = 0; i < n; i++)
        x[i] = x[i] * x[i] + 1.5f;
    return x[0];
}

/* log-sum-exp through a variable-length array (a stack allocation of runtime size) */
double vla_logsumexp(const double *x, int n) {
    double t[n];
    double m = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > m)
            m = x[i];
    for (int i = 0; i < n; i++)
        t[i] = exp(x[i] - m);
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += t[i];
    return m + log(s);
}

/* a variable-length array inside a loop: each round saves and restores the stack */
double vla_rounds(const double *x, int n, int rounds) {
    double s = 0.0;
    for (int r = 1; r <= rounds; r++) {
        double t[n];
        for (int i = 0; i < n; i++)
            t[i] = sin(x[i] * r);
        for (int i = 0; i < n; i++)
            s += t[i] * t[i];
    }
    return s;
}

/* x^n with an integer exponent known only at run time (llvm.powi / __powidf2) */
double int_power(const double *x, int n, int k) {
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += __builtin_powi(x[i], k);
    return s;
}
