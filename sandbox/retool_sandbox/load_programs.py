"""The programs ``retool-sandbox loadtest`` sends: the kind of code ReTool-SFT traces hold, written for this recipe.

Each ``Program`` is what a model writes in one tool call while it solves a competition problem: sympy solving,
factoring and summing, numpy and scipy numerics, loops over cases, exact fractions, mpmath digits, a table of values;
a few run from half a second to seconds, one prints 288 KB (above the ~200 KB at which SandboxFusion's output
handling is known to break), and one fails with a traceback like a model's typo. ``weight`` is its share of the calls
in percent (they add up to 100; ``loadtest.plan`` deals them from a shuffled deck). Every program is deterministic
(fixed seeds), so the load test can compare each reply with the one the idle sandbox gave and catch a wrong, cut or
crossed output. The run time and output size of the
mix are measured, not assumed: the load test runs every program once on the idle sandbox first and reports the
weighted shares (``retool-sandbox loadtest`` prints them; docs/performance.md has this host's).

``TIMEOUT_PROGRAM`` is not in the mix: it spins until the call's timeout and is what ``--timeout-burst`` sends.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Program:
    name: str
    weight: int  # share of calls in percent
    code: str
    expect: str = "ok"  # the outcome on an idle sandbox: ok or error_exit (retool_sandbox.client.OUTCOMES)


PROGRAMS: tuple[Program, ...] = (
    Program(
        "sympy solve cubic",
        10,
        """\
from sympy import symbols, solve
x = symbols('x')
roots = solve(x**3 - 6*x**2 + 11*x - 6, x)
print(sorted(roots))
""",
    ),
    Program(
        "sympy factor polynomial",
        8,
        """\
from sympy import symbols, expand, factor
x, y = symbols('x y')
p = expand((x - 2*y)**3 * (x + y + 1)**2)
print(factor(p))
""",
    ),
    Program(
        "sympy factorint",
        7,
        """\
from sympy import factorint, divisor_count, totient
n = 600851475143
print(factorint(n), divisor_count(n), totient(n))
""",
    ),
    Program(
        "sympy linear system",
        7,
        """\
from sympy import symbols, Eq, solve
a, b, c = symbols('a b c')
print(solve([Eq(a + b + c, 6), Eq(2*a - b + c, 3), Eq(a + 2*b - c, 2)], [a, b, c]))
""",
    ),
    Program(
        "sympy summation and limit",
        6,
        """\
from sympy import symbols, summation, limit, simplify, oo
k, n = symbols('k n', positive=True, integer=True)
s = simplify(summation(1 / (k * (k + 1)), (k, 1, n)))
print(s, limit(s, n, oo))
""",
    ),
    Program(
        "sympy integrate (long)",
        2,
        """\
from sympy import symbols, integrate, exp, sin, cos, simplify
x = symbols('x')
r = integrate(x**3 * exp(2*x) * sin(3*x), x)
print(simplify(r.diff(x) - x**3 * exp(2*x) * sin(3*x)))
print(integrate(x**2 * cos(x)**2, (x, 0, 1)).evalf(12))
""",
    ),
    Program(
        "numpy eigenvalues",
        7,
        """\
import numpy as np
rng = np.random.default_rng(7)
a = rng.standard_normal((150, 150))
s = (a + a.T) / 2
w = np.linalg.eigvalsh(s)
print(round(float(w.sum()), 6), round(float(np.trace(s)), 6), round(float(w.max()), 6))
""",
    ),
    Program(
        "numpy monte carlo",
        6,
        """\
import numpy as np
rng = np.random.default_rng(2024)
p = rng.random((400_000, 2))
inside = int(((p ** 2).sum(axis=1) <= 1).sum())
print(inside, 4 * inside / len(p))
""",
    ),
    Program(
        "scipy minimize",
        5,
        """\
from scipy.optimize import minimize
def f(v):
    x, y = v
    return (1 - x) ** 2 + 100 * (y - x * x) ** 2
r = minimize(f, [-1.2, 1.0], method='BFGS')
print([round(float(t), 4) for t in r.x], r.success)
""",
    ),
    Program(
        "loop over cases",
        8,
        """\
count = 0
for n in range(1, 200_001):
    if sum(map(int, str(n))) % 7 == 0:
        count += 1
print(count)
""",
    ),
    Program(
        "combinatorics",
        6,
        """\
from itertools import combinations
nums = list(range(1, 19))
hits = sum(1 for c in combinations(nums, 4) if sum(c) % 9 == 0)
print(hits)
""",
    ),
    Program(
        "exact fractions",
        5,
        """\
from fractions import Fraction
h = sum(Fraction(1, k) for k in range(1, 301))
print(len(str(h.numerator)), h.denominator % 1_000_007)
""",
    ),
    Program(
        "mpmath digits",
        4,
        """\
from mpmath import mp, pi, sqrt, e
mp.dps = 300
print(str(pi)[:60])
print(str(sqrt(2) + e)[:60])
""",
    ),
    Program(
        "arithmetic",
        6,
        """\
print(pow(2, 100, 997), 17 * 23, 2**64 - 1)
""",
    ),
    Program(
        "table of values",
        5,
        """\
for n in range(1, 301):
    print(n, n * n, n ** 3, n * (n + 1) // 2)
""",
    ),
    Program(
        "prints a lot (300 KB)",
        2,
        """\
for i in range(6000):
    print(f"{i:6d} " + "abcdefghij" * 4)
""",
    ),
    Program(
        "brute-force search (long)",
        2,
        """\
best = 0
for a in range(1, 1500):
    for b in range(a, 1500):
        c2 = a * a + b * b
        c = int(c2 ** 0.5)
        if c * c == c2 and a + b + c <= 3000:
            best = max(best, a * b * c)
print(best)
""",
    ),
    Program(
        "traceback (a model's typo)",
        4,
        """\
from sympy import symbols
x = symbols('x')
print(x**2 + undefined_name)
""",
        expect="error_exit",
    ),
)

TIMEOUT_PROGRAM = Program(
    "spins until its timeout",
    0,
    """\
while True:
    pass
""",
    expect="timeout",
)
