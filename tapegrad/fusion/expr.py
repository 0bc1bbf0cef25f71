"""Scalar expression IR: an interned DAG, a parser from Python syntax, and the
symbolic reverse-mode derivative.

Nodes are hash-consed (``_intern``), so building the same subexpression twice gives
the same node: common subexpressions are shared for free, in forward expressions
and in derived adjoints alike (an adjoint reuses the forward's nodes, so a backward
kernel recomputes the forward intermediates it needs instead of storing them).

>>> x = var("x")
>>> str(parse("x * sigmoid(x)"))
'(x * sigmoid(x))'
>>> [str(a) for a in grad([parse("x * x")], [x], [var("g")])]
'...'  # doctest: +SKIP
"""
import ast
import itertools
import math

UNARY = ("neg", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "tanh", "sigmoid", "softplus",
         "erf", "sin", "cos", "abs", "sign", "not", "exp2", "log2", "log10")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "logaddexp",
          "lt", "le", "gt", "ge", "eq", "ne", "and", "or")
BOOL_OPS = ("lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not")
COMMUTATIVE = ("add", "mul", "maximum", "minimum", "logaddexp", "eq", "ne", "and", "or")

_counter = itertools.count()
_TABLE = {}


class Node:
    """One scalar operation: ``op``, argument nodes, and a value (const / var name)."""
    __slots__ = ("op", "args", "value", "id")

    def __init__(self, op, args, value):
        self.op, self.args, self.value = op, args, value
        self.id = next(_counter)

    @property
    def is_bool(self):
        return self.op in BOOL_OPS or (self.op == "where" and self.args[1].is_bool)

    def __repr__(self):
        return f"Node({self})"

    def __str__(self):
        if self.op == "const":
            return repr(self.value)
        if self.op == "var":
            return self.value
        return _fmt(self)


_SYM = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">",
        "ge": ">=", "eq": "==", "ne": "!=", "and": "&", "or": "|"}


def _fmt(n):
    a = [str(x) for x in n.args]
    if n.op in _SYM:
        return f"({a[0]} {_SYM[n.op]} {a[1]})"
    if n.op == "neg":
        return f"(-{a[0]})"
    return f"{n.op}({', '.join(a)})"


def _intern(op, args=(), value=None):
    if op in COMMUTATIVE and args[1].id < args[0].id:
        args = (args[1], args[0])
    key = (op, args, repr(value) if op == "const" else value)
    n = _TABLE.get(key)
    if n is None:
        n = _TABLE[key] = Node(op, args, value)
    return n


def var(name):
    return _intern("var", (), name)


def const(v):
    return _intern("const", (), float(v))


def _c(v):
    return v if isinstance(v, Node) else const(v)


def _is(n, v):
    return n.op == "const" and n.value == v


# ---------------------------------------------------------------- builders
_FOLD = {"neg": lambda a: -a, "exp": math.exp, "log": math.log, "log1p": math.log1p,
         "expm1": math.expm1, "sqrt": math.sqrt, "rsqrt": lambda a: 1 / math.sqrt(a),
         "tanh": math.tanh, "sigmoid": lambda a: 1 / (1 + math.exp(-a)), "erf": math.erf,
         "softplus": lambda a: max(a, 0.0) + math.log1p(math.exp(-abs(a))),
         "sin": math.sin, "cos": math.cos, "abs": abs, "exp2": lambda a: 2.0 ** a,
         "log2": math.log2, "log10": math.log10,
         "sign": lambda a: float((a > 0) - (a < 0)),
         "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "div": lambda a, b: a / b, "pow": lambda a, b: a ** b, "maximum": max,
         "minimum": min, "logaddexp": lambda a, b: (
             a + math.log(2.0) if a == b else max(a, b) + math.log1p(math.exp(-abs(a - b))))}


def unary(op, a):
    a = _c(a)
    if a.op == "const" and op in _FOLD:
        try:
            return const(_FOLD[op](a.value))
        except (ValueError, ZeroDivisionError, OverflowError):
            pass
    if op == "neg" and a.op == "neg":
        return a.args[0]
    return _intern(op, (a,))


def binary(op, a, b):
    a, b = _c(a), _c(b)
    if a.op == "const" and b.op == "const" and op in _FOLD:
        try:
            return const(_FOLD[op](a.value, b.value))
        except (ValueError, ZeroDivisionError, OverflowError):
            pass
    # identities that hold for every input, NaN and inf included (no x * 0 -> 0)
    if op == "add":
        if _is(a, 0.0):
            return b
        if _is(b, 0.0):
            return a
        if b.op == "neg":
            return binary("sub", a, b.args[0])
        if a is b:
            return binary("mul", a, 2.0)
    if op == "sub":
        if _is(b, 0.0):
            return a
        if _is(a, 0.0):
            return unary("neg", b)
        if b.op == "neg":
            return binary("add", a, b.args[0])
    if op == "mul":
        if _is(a, 1.0):
            return b
        if _is(b, 1.0):
            return a
        if _is(a, -1.0):
            return unary("neg", b)
        if _is(b, -1.0):
            return unary("neg", a)
    if op == "div" and _is(b, 1.0):
        return a
    if op == "pow" and b.op == "const":
        if b.value == 1.0:
            return a
        if b.value == 0.0:
            return const(1.0)
    return _intern(op, (a, b))


def where(c, a, b):
    c, a, b = _c(c), _c(a), _c(b)
    if a is b:
        return a
    if c.op == "const":
        return a if c.value else b
    return _intern("where", (c, a, b))


def add(a, b):
    return binary("add", a, b)


def sub(a, b):
    return binary("sub", a, b)


def mul(a, b):
    return binary("mul", a, b)


def div(a, b):
    return binary("div", a, b)


def neg(a):
    return unary("neg", a)


def _acc(a, b):
    """Sum of two adjoint contributions, ``None`` meaning zero."""
    if a is None:
        return b
    if b is None:
        return a
    return add(a, b)


# ---------------------------------------------------------------- parser
# functions that are other expressions; x, y are their arguments
MACROS = {
    "square": ("x", "x * x"),
    "reciprocal": ("x", "1 / x"),
    "relu": ("x", "maximum(x, 0)"),
    "tan": ("x", "sin(x) / cos(x)"),
    # above |x| = 20 (exp(-|x|) below an ulp of the result): e^|x| / 2 as exp(|x| - c)
    # times exp(c - log 2), c = 0.693359375 (|x| - c is exact): no overflow before the
    # result's own (float32 cosh(89.4) is 3.4e38); below, formulas without cancellation
    # (cosh(x) = 1 + u^2 / (2 (1 + u)), u = expm1(|x|)) on an argument kept in range, so
    # that the unused branch's gradient is not 0 * inf
    "sinh": ("x", "where(abs(x) > 20, sign(x) * (exp(abs(x) - 0.693359375) * 1.0002122169548875),"
                  " 0.5 * (expm1(where(abs(x) > 20, 0, x)) - expm1(-where(abs(x) > 20, 0, x))))"),
    "cosh": ("x", "where(abs(x) > 20, exp(abs(x) - 0.693359375) * 1.0002122169548875,"
                  " 1 + expm1(where(abs(x) > 20, 0, abs(x))) * expm1(where(abs(x) > 20, 0, abs(x)))"
                  " / (2 * (1 + expm1(where(abs(x) > 20, 0, abs(x))))))"),
    "silu": ("x", "x * sigmoid(x)"),
    "logsigmoid": ("x", "-softplus(-x)"),
    "clamp": ("x lo hi", "minimum(maximum(x, lo), hi)"),
}
_ALIASES = {"max": "maximum", "min": "minimum", "fabs": "abs", "absolute": "abs"}
_NAMES = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan}
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow",
           ast.BitAnd: "and", ast.BitOr: "or"}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq",
           ast.NotEq: "ne"}


def free_names(src):
    """Free variable names of an expression, in order of first appearance."""
    found = {}

    class V(ast.NodeVisitor):
        def visit_Call(self, n):
            for arg in n.args:
                self.visit(arg)

        def visit_Name(self, n):
            if n.id not in _NAMES:
                found.setdefault(n.id, (n.lineno, n.col_offset))
    try:
        V().visit(ast.parse(src.strip(), mode="eval"))
    except SyntaxError as e:
        raise ValueError(f"elementwise: cannot parse expression {src!r}: {e.msg}") from None
    return sorted(found, key=found.get)


def parse(src, env=None):
    """Parse a Python-syntax scalar expression into a Node.

    ``env`` maps names to Nodes or numbers (inputs, attributes); other free names
    become ``var`` nodes. Raises ``ValueError`` naming what is not supported.
    """
    try:
        tree = ast.parse(src.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"elementwise: cannot parse expression {src!r}: {e.msg}") from None
    return _Parser(src, env or {}).visit(tree.body)


def parse_call(fn, args):
    """The node of ``fn(*args)`` for a function name the parser knows."""
    return _Parser(fn, {}).call(_ALIASES.get(fn, fn), [_c(a) for a in args])


class _Parser:
    def __init__(self, src, env):
        self.src, self.env = src, env

    def fail(self, what):
        raise ValueError(f"elementwise: {what} is not supported in expression {self.src!r}")

    def visit(self, n):
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float, bool)):
            return const(float(n.value))
        if isinstance(n, ast.Name):
            if n.id in self.env:
                return _c(self.env[n.id])
            if n.id in _NAMES:
                return const(_NAMES[n.id])
            return var(n.id)
        if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
            return binary(_BINOPS[type(n.op)], self.visit(n.left), self.visit(n.right))
        if isinstance(n, ast.UnaryOp):
            v = self.visit(n.operand)
            if isinstance(n.op, ast.USub):
                return neg(v)
            if isinstance(n.op, ast.UAdd):
                return v
            if isinstance(n.op, (ast.Not, ast.Invert)):
                return unary("not", v)
        if isinstance(n, ast.Compare):
            out, left = None, self.visit(n.left)
            for op, right in zip(n.ops, n.comparators):
                if type(op) not in _CMPOPS:
                    self.fail(f"comparison {type(op).__name__}")
                r = self.visit(right)
                c = binary(_CMPOPS[type(op)], left, r)
                out = c if out is None else binary("and", out, c)
                left = r
            return out
        if isinstance(n, ast.BoolOp):
            op = "and" if isinstance(n.op, ast.And) else "or"
            vals = [self.visit(v) for v in n.values]
            out = vals[0]
            for v in vals[1:]:
                out = binary(op, out, v)
            return out
        if isinstance(n, ast.IfExp):
            return where(self.visit(n.test), self.visit(n.body), self.visit(n.orelse))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and not n.keywords:
            return self.call(_ALIASES.get(n.func.id, n.func.id), [self.visit(a) for a in n.args])
        self.fail(f"syntax {ast.dump(n)[:40]}")

    def call(self, fn, args):
        if fn in MACROS:
            names, body = MACROS[fn]
            names = names.split()
            if len(args) != len(names):
                self.fail(f"{fn} with {len(args)} arguments")
            return parse(body, dict(zip(names, args)))
        if fn == "where" and len(args) == 3:
            return where(*args)
        if fn == "pow" and len(args) == 2:
            return binary("pow", *args)
        if fn in UNARY and len(args) == 1:
            return unary(fn, args[0])
        if fn in BINARY and len(args) == 2:
            return binary(fn, *args)
        self.fail(f"function {fn}() with {len(args)} argument(s)")


# ---------------------------------------------------------------- graph walks
def topo(outputs, stop=()):
    """Nodes reachable from ``outputs``, arguments before users; a node in ``stop``
    is listed but its arguments are not walked through."""
    order, seen = [], set()
    stack = [(o, False) for o in reversed(outputs)]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
            continue
        if n.id in seen:
            continue
        seen.add(n.id)
        stack.append((n, True))
        if n not in stop:
            stack.extend((a, False) for a in reversed(n.args) if a.id not in seen)
    return order


def substitute(outputs, mapping):
    """Rebuild ``outputs`` with nodes replaced per ``mapping`` (node -> node)."""
    memo = dict(mapping)
    for n in topo(outputs):
        if n in memo:
            continue
        if not n.args:
            memo[n] = n
        else:
            args = [memo[a] for a in n.args]
            memo[n] = (where(*args) if n.op == "where" else
                       unary(n.op, *args) if len(args) == 1 else binary(n.op, *args))
    return [memo[o] for o in outputs]


# ---------------------------------------------------------------- derivative
_HALF, _ZERO = 0.5, 0.0
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_LN2, _LN10 = math.log(2.0), math.log(10.0)


def _maxmin_rule(n, a, pick):
    # ties split the gradient evenly, as tapegrad's (and PyTorch's) maximum
    x, y = n.args
    eq = binary("eq", x, y)
    half = mul(a, _HALF)
    first = binary(pick, x, y)
    return (where(eq, half, where(first, a, _ZERO)), where(eq, half, where(first, _ZERO, a)))


def _pow_rule(n, a):
    x, y = n.args
    if y.op == "const":
        c = y.value
        return (mul(a, mul(c, binary("pow", x, c - 1.0)))
                if c != 2.0 else mul(a, mul(x, 2.0)), None)
    gx = mul(a, mul(y, binary("pow", x, sub(y, 1.0))))
    # d/dy x**y = x**y log x, taken as 0 where x == 0 (as tapegrad's pow)
    gy = where(binary("eq", x, 0.0), _ZERO, mul(a, mul(n, unary("log", x))))
    return gx, gy


RULES = {
    "add": lambda n, a: (a, a),
    "sub": lambda n, a: (a, neg(a)),
    "mul": lambda n, a: (mul(a, n.args[1]), mul(a, n.args[0])),
    "div": lambda n, a: (div(a, n.args[1]), neg(div(mul(a, n), n.args[1]))),
    "neg": lambda n, a: (neg(a),),
    "pow": _pow_rule,
    "exp": lambda n, a: (mul(a, n),),
    "log": lambda n, a: (div(a, n.args[0]),),
    "log1p": lambda n, a: (div(a, add(n.args[0], 1.0)),),
    "expm1": lambda n, a: (mul(a, add(n, 1.0)),),
    "exp2": lambda n, a: (mul(a, mul(n, _LN2)),),
    "log2": lambda n, a: (div(a, mul(n.args[0], _LN2)),),
    "log10": lambda n, a: (div(a, mul(n.args[0], _LN10)),),
    "sqrt": lambda n, a: (div(mul(a, _HALF), n),),
    "rsqrt": lambda n, a: (mul(mul(a, -0.5), mul(n, mul(n, n))),),
    "tanh": lambda n, a: (mul(a, sub(1.0, mul(n, n))),),
    "sigmoid": lambda n, a: (mul(a, mul(n, sub(1.0, n))),),
    # a primitive, not its stable formula max(x, 0) + log1p(exp(-|x|)), whose derivative
    # through max and abs loses the terms at x == 0: softplus''(0) must be 0.25
    "softplus": lambda n, a: (mul(a, unary("sigmoid", n.args[0])),),
    "erf": lambda n, a: (mul(a, mul(_TWO_OVER_SQRT_PI,
                                     unary("exp", neg(mul(n.args[0], n.args[0]))))),),
    "sin": lambda n, a: (mul(a, unary("cos", n.args[0])),),
    "cos": lambda n, a: (neg(mul(a, unary("sin", n.args[0]))),),
    "abs": lambda n, a: (mul(a, unary("sign", n.args[0])),),
    "maximum": lambda n, a: _maxmin_rule(n, a, "gt"),
    # sigmoid(x - y), as the op's own adjoint: no cancellation, and NaN at two equal
    # infinities, as PyTorch's
    "logaddexp": lambda n, a: (mul(a, unary("sigmoid", sub(n.args[0], n.args[1]))),
                               mul(a, unary("sigmoid", sub(n.args[1], n.args[0])))),
    "minimum": lambda n, a: _maxmin_rule(n, a, "lt"),
    "where": lambda n, a: (None, where(n.args[0], a, _ZERO), where(n.args[0], _ZERO, a)),
}


def grad(outputs, wrt, cotangents):
    """Reverse accumulation over the DAG.

    ``cotangents[k]`` (a Node or ``None`` for zero) seeds ``outputs[k]``; returns one
    adjoint expression per node of ``wrt`` (``None`` where it does not depend on the
    outputs). Each contribution is built once per edge, and interning shares every
    repeated subexpression with the forward and with the other adjoints.
    """
    adj = {}
    for o, c in zip(outputs, cotangents):
        if c is not None and not o.is_bool:
            adj[o] = _acc(adj.get(o), c)
    for n in reversed(topo(outputs)):
        a = adj.get(n)
        if a is None or not n.args or n.is_bool:
            continue
        rule = RULES.get(n.op)
        if rule is None:  # sign: zero derivative almost everywhere
            continue
        for arg, contrib in zip(n.args, rule(n, a)):
            if contrib is not None and not arg.is_bool and arg.op != "const":
                adj[arg] = _acc(adj.get(arg), contrib)
    return [adj.get(w) for w in wrt]
