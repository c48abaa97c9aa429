"""Nothing is silently dropped: every callable the tracer maps binds all of its arguments
or refuses the call.

The walk takes each public callable of torch, torch.nn.functional, torch.special, the
Tensor methods, a few builtins and math, finds argument lists that eager accepts and the
tracer traces (with fullgraph=True, in-process), and checks:
- the traced graph, run by the reference interpreter, gives eager's result;
- an unknown keyword is refused (eager raises);
- one more positional argument is refused where eager raises, and otherwise gives eager's
  result.
"""
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from kiln import _trace, ir

ARGUMENTS = ["x", "x, y", "x, 1", "x, 0", "x, -1", "x, 0.5", "x, [1]", "x, (4, 3)", "x, 0, 1", "x, 1, 2",
             "x, y, y", "[x, y]", "[x, y], 0", "(x, y)", "x > 0, x, y", "x, x > 0, 0.0", "x, torch.float64",
             "x, 2, 3", "(3, 4)", "3, 4", "x, y, 0.5", "x, (1,)", "x, 2", "x, [0, 1]", "idx", "x, 1, idx",
             "x, 0, idx", "x, 0, idx, y", "x, idx", "x.shape", "4", "3", "x, 3, 4", "x, [3, 4]", "x, (2, 2)",
             "x, 0, True", "x, 0, False", "x, 1, True", "x, [0], False"]
EXTRA = ["1", "0", "True", "y"]
# Names whose calls draw random numbers, leave memory unset, or change global state.
SKIPPED = ("rand", "dropout", "bernoulli", "multinomial", "normal", "poisson", "empty", "seed")
UNSAFE = ("set_", "use_", "init", "compile", "export", "load", "save", "cuda", "enable", "disable", "vmap",
          "cond", "while_loop", "jit", "register", "from_file", "compiled_with", "fork", "wait", "can_cast")


def _callables():
    """(name, a function from an argument list's text to a call's text)."""
    out = []
    for prefix, module in (("torch", torch), ("F", F), ("torch.special", torch.special)):
        for n in sorted(dir(module)):
            obj = getattr(module, n, None)
            if n.startswith("_") or isinstance(obj, type) or not callable(obj) or n.startswith(UNSAFE) \
                    or any(s in n for s in SKIPPED):
                continue
            out.append((f"{prefix}.{n}", lambda a, p=prefix, n=n: f"{p}.{n}({a})"))
    for n in sorted(dir(torch.Tensor)):
        if n.startswith("_") or any(s in n for s in SKIPPED) or not callable(getattr(torch.Tensor, n, None)):
            continue
        out.append((f"Tensor.{n}", lambda a, n=n: f"x.{n}({a[3:]})" if a.startswith("x, ") else
                    f"x.{n}()" if a == "x" else None))
    for n in ("len", "abs", "min", "max", "sum", "round", "int", "float", "bool", "divmod", "pow", "isinstance",
              "getattr", "hasattr"):
        out.append((f"builtins.{n}", lambda a, n=n: f"{n}({a})"))
    for n in sorted(dir(math)):
        if callable(getattr(math, n)) and not n.startswith("_"):
            out.append((f"math.{n}", lambda a, n=n: f"math.{n}({a})"))
    return out


def _function(call: str):
    scope = {"torch": torch, "F": F, "math": math}
    exec(f"def fn(x, y, idx):\n    return {call}\n", scope)  # the test's own text
    return scope["fn"]


def _inputs():
    torch.manual_seed(0)
    return torch.randn(3, 4), torch.randn(3, 4), torch.tensor([0, 2])


def _eager(fn):
    """(True, result) or (False, the exception)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return True, fn(*_inputs())
    except Exception as e:
        return False, e


def _traced(fn):
    """(True, the traced graph's result by the reference interpreter) or (False, why refused)."""
    args = _inputs()
    try:
        traced = _trace.trace(fn, args, {}, fullgraph=True)
    except _trace.Unsupported as e:
        return False, str(e)
    results = ir.run(traced.graph, *_trace.graph_inputs(traced, fn, args, {}))
    return True, traced.rebuild(results, (fn, args, {}))


def _same(got, expected) -> bool:
    if isinstance(expected, torch.Tensor):
        return isinstance(got, torch.Tensor) and got.dtype == expected.dtype and got.shape == expected.shape \
            and torch.allclose(got.double(), expected.double(), equal_nan=True, atol=1e-5)
    if isinstance(expected, (tuple, list)):
        return type(got) is type(expected) and len(got) == len(expected) and all(map(_same, got, expected))
    return type(got) is type(expected) and got == expected


def _with(call: str, extra: str) -> str:
    return call[:-1] + ("" if call.endswith("()") else ", ") + extra + ")"


def test_every_mapped_callable_binds_all_of_its_arguments_or_refuses():
    problems, mapped = [], 0
    for name, form in _callables():
        for arguments in ARGUMENTS:
            call = form(arguments)
            if call is None:
                continue
            ok, expected = _eager(_function(call))
            if not ok:
                continue
            traced, got = _traced(_function(call))
            if not traced:
                continue
            mapped += 1
            if not _same(got, expected):
                problems.append(f"{call}: kiln gives {got!r:.80}, eager {expected!r:.80}")
            unknown = _with(call, "kiln_unknown=1")
            if not _eager(_function(unknown))[0] and _traced(_function(unknown))[0]:
                problems.append(f"{unknown}: traced where eager raises")
            for extra in EXTRA:
                longer = _with(call, extra)
                ok, expected = _eager(_function(longer))
                traced, got = _traced(_function(longer))
                if traced and not ok:
                    problems.append(f"{longer}: traced where eager raises {type(expected).__name__}")
                elif traced and not _same(got, expected):
                    problems.append(f"{longer}: kiln gives {got!r:.80}, eager {expected!r:.80}")
    assert mapped > 800, f"only {mapped} calls traced: the walk no longer reaches the tracer's mappings"
    assert not problems, f"{len(problems)} calls bound wrongly:\n" + "\n".join(problems[:40])
