"""Graph breaks: the rest of a frame after an instruction the tracer refused.

A trace that stops at a graph break (docs/tracer.md) gives the graph of the code before
it and, from that graph's outputs, the frame's value stack and live locals there. The
refused instructions then run eagerly in a *glue* function: the frame's code with a
prologue that pushes the stack, those instructions, and an epilogue returning what they
left on the stack. A conditional jump is decided here, a return returns. The rest runs
in a *resume* function, compiled by kiln as a frame of its own (its own cache and
guards; it may break again): the frame's code whole, behind a prologue that pushes the
stack from its arguments and jumps to where the frame was. Its arguments are the stack
slots (`__kiln_s0`, ...) and the live locals, by their names.

Both are made from the frame's bytecode (CPython 3.11 and 3.12): local and cell opargs
renumbered for the arguments put first, the exception table shifted past the prologue.

Each Python frame the glue calls is offered to kiln (the frame hook, python/src/frame_hook.c)
and may run compiled: a break inside a function the frame called costs that call.

A break costs ~15 µs of host time beyond the unbroken call (bench/README, e2e_cpu): a
second compiled call and the glue frame; the layouts of a call whose layouts cannot depend
on its values are kept (`Continuation.plan`).
"""
from __future__ import annotations

import dis
import operator
import sys
import types

from kiln import _kiln
from kiln._trace import _JUMPS, NULL, MadeFunction, Unsupported, _exception_entries

_OP = dis.opmap
_EXTENDED_ARG = _OP["EXTENDED_ARG"]
_LOCAL_OPS = set(dis.haslocal) | set(dis.hasfree)
_VARARGS, _VARKEYWORDS = 0x04, 0x08
_CONDITIONAL = ("POP_JUMP", "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP")


def _caches(op: int) -> int:
    return dis._inline_cache_entries[op]


def instructions(code: types.CodeType) -> list:
    """The code's instructions as the tracer numbers them (dis's listing, no CACHEs)."""
    return list(dis.get_instructions(code))


def _encode(op: int, arg: int = 0) -> list:
    """One instruction as code units (op, arg byte): EXTENDED_ARG prefixes, CACHEs after."""
    units, shift = [], max(0, (arg.bit_length() - 1) // 8) * 8
    while shift > 0:
        units.append((_EXTENDED_ARG, (arg >> shift) & 0xFF))
        shift -= 8
    units.append((op, arg & 0xFF))
    return units + [(0, 0)] * _caches(op)


def _units(code: types.CodeType) -> list:
    b = code.co_code
    return [(b[i], b[i + 1]) for i in range(0, len(b), 2)]


def _renumbered(units: list, mapping: dict) -> list:
    """`units` with each local/cell oparg mapped; an oparg that no longer fits its
    EXTENDED_ARG prefixes is refused."""
    out, i, prefix = list(units), 0, None
    while i < len(units):
        op, _ = units[i]
        if op == _EXTENDED_ARG:
            prefix = i if prefix is None else prefix
            i += 1
            continue
        if op in _LOCAL_OPS:
            start = i if prefix is None else prefix
            old = 0
            for k in range(start, i + 1):
                old = (old << 8) | units[k][1]
            new = mapping[old]
            if new >= 1 << (8 * (i - start + 1)):
                raise Unsupported("a graph break in a function with more than 255 locals")
            for k in range(i, start - 1, -1):
                out[k] = (units[k][0], new & 0xFF)
                new >>= 8
        prefix = None
        i += 1 + _caches(op)
    return out


# ---- the exception and location tables (Objects/exception_handling_notes.txt, locations.md) ----

def _exception_table(entries: list) -> bytes:
    def varint(value: int, first: bool) -> list:
        chunks = [value & 63]
        value >>= 6
        while value:
            chunks.append(value & 63)
            value >>= 6
        chunks.reverse()
        out = [c | 64 for c in chunks[:-1]] + [chunks[-1]]
        if first:
            out[0] |= 128
        return out
    data = []
    for start, end, target, depth_lasti in entries:
        data += varint(start, True) + varint(end - start, False) + varint(target, False) + varint(depth_lasti, False)
    return bytes(data)


def _made_functions(spec):
    """The MadeFunction specs anywhere in a break's (or a spec's) dicts and lists."""
    if isinstance(spec, dict):
        if "function" in spec and isinstance(spec["function"], dict) and "qualname" in spec["function"]:
            yield spec["function"]
        for v in spec.values():
            yield from _made_functions(v)
    elif isinstance(spec, list):
        for v in spec:
            yield from _made_functions(v)


def _nested_code(code: types.CodeType, qualname: str, first_line: int) -> types.CodeType | None:
    """The code object among `code`'s constants (at any depth) of this qualname and first line."""
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            if c.co_qualname == qualname and c.co_firstlineno == first_line:
                return c
            found = _nested_code(c, qualname, first_line)
            if found is not None:
                return found
    return None


def _handler(code: types.CodeType, offset: int) -> tuple | None:
    """The exception-table entry covering the instruction at `offset` (the table is flat: at
    most one): (handler offset, stack depth there, whether it pushes lasti), or None."""
    unit = offset // 2
    for start, end, target, depth_lasti in _exception_entries(code):
        if start <= unit < end:
            return target * 2, depth_lasti >> 1, bool(depth_lasti & 1)
    return None


def _location_entries(units: int, line_delta: int | None) -> bytes:
    """Location-table entries covering `units` code units: no location (None), or one
    line (`line_delta` from the line before) without columns."""
    out = []
    first = True
    while units > 0:
        n = min(units, 8)
        if line_delta is None:
            out.append(0x80 | (15 << 3) | (n - 1))
        else:
            out.append(0x80 | (13 << 3) | (n - 1))
            delta = line_delta if first else 0
            value = (abs(delta) << 1) | (delta < 0)
            while value >= 64:
                out.append(64 | (value & 63))
                value >>= 6
            out.append(value)
        first = False
        units -= n
    return bytes(out)


# ---- the frame's state as arguments ---------------------------------------------------------

# Iterators the traced code made (a loop's, at a break inside it; `iter(...)` in a local)
# pass to the resume function as the tuple of what they have left: its trace then unrolls
# the rest of the loop. The frame holds them alone, so the resume function's own iterator
# over that tuple stands for them. Others (the call's, a generator) pass as they are.
_ITERATORS = (type(iter([])), type(iter(())), type(iter(range(0))))
_MAX_ITEMS = 1000


def slot_kinds(values: list, private: tuple = ()) -> tuple:
    """Per value: "null", "iter" (an iterator of the frame's own, `private`, passed as its
    items) or "value"."""
    private = private or (False,) * len(values)
    return tuple("null" if v is NULL else
                 "iter" if own and type(v) in _ITERATORS and v.__length_hint__() <= _MAX_ITEMS else "value"
                 for v, own in zip(values, private))


class Layout:
    """A frame's value stack, live locals and cells as a new code's arguments: the stack's
    slots that are not NULL (`__kiln_s<k>`), the passed locals, the cells (each passed as
    the cell object: no MAKE_CELL runs), then the other varnames. `mapping` renumbers the
    frame's local, cell and free-variable indices for that order."""

    def __init__(self, code: types.CodeType, kinds: tuple, passed: tuple, local_kinds: tuple = ()):
        self.kinds, self.passed = kinds, passed
        self.local_kinds = local_kinds or ("value",) * len(passed)  # "iter": passed as its items
        # A resume function's own slots are dead locals of it: a break in it names its slots anew.
        level = 0
        while any(n.startswith(f"__kiln{level or ''}_s") for n in code.co_varnames):
            level += 1
        slot = lambda k: f"__kiln{level or ''}_s{k}"  # noqa: E731
        slots = tuple(slot(k) for k, kind in enumerate(kinds) if kind != "null")
        cells = tuple(code.co_cellvars)
        self.code_cells = cells
        arguments = slots + passed + cells
        # Zero-argument super() reads the first argument from the frame's first slot: it stays first.
        first = code.co_varnames[0] if code.co_argcount and "__class__" in code.co_freevars else None
        if first is not None and first in arguments:
            arguments = (first,) + tuple(n for n in arguments if n != first)
        self.order = [arguments.index(n) for n in slots + passed + cells]  # arguments() order -> position
        self.varnames = arguments + tuple(n for n in code.co_varnames if n not in arguments)
        self.argcount = len(arguments)
        self.flags = code.co_flags & ~(_VARARGS | _VARKEYWORDS)
        laid_out = self._replace(code)
        index = {n: k for k, n in enumerate(_localsplus(laid_out))}
        self.mapping = {k: index[n] for k, n in enumerate(_localsplus(code))}
        self.slot_index = {k: index[slot(k)] for k, kind in enumerate(kinds) if kind != "null"}

    def _replace(self, code: types.CodeType, **changes) -> types.CodeType:
        return code.replace(co_varnames=self.varnames, co_argcount=self.argcount, co_posonlyargcount=0,
                            co_kwonlyargcount=0, co_nlocals=len(self.varnames), co_flags=self.flags, **changes)

    def prologue(self, code: types.CodeType) -> list:
        """COPY_FREE_VARS, RESUME, then the stack pushed (PUSH_NULL for its NULLs, GET_ITER
        over an iterator's items) and its argument slots cleared (the stack holds them now)."""
        units = []
        if code.co_freevars:
            units += _encode(_OP["COPY_FREE_VARS"], len(code.co_freevars))
        units += _encode(_OP["RESUME"], 0)
        for k, kind in enumerate(self.kinds):
            if kind == "null":
                units += _encode(_OP["PUSH_NULL"])
                continue
            units += _encode(_OP["LOAD_FAST"], self.slot_index[k])
            if kind == "iter":
                units += _encode(_OP["GET_ITER"])
        for k in self.slot_index.values():
            units += _encode(_OP["DELETE_FAST"], k)
        for name, kind in zip(self.passed, self.local_kinds):
            if kind == "iter":  # an iterator local, passed as what it has left
                at = self.varnames.index(name)
                units += _encode(_OP["LOAD_FAST"], at) + _encode(_OP["GET_ITER"]) + _encode(_OP["STORE_FAST"], at)
        return units

    def arguments(self, stack: list, locals_: list, cells: list) -> list:
        given = [tuple(v) if kind == "iter" else v for v, kind in zip(stack, self.kinds) if kind != "null"] + \
            [tuple(v) if kind == "iter" else v for v, kind in zip(locals_, self.local_kinds)] + list(cells)
        out = [None] * len(given)
        for value, position in zip(given, self.order):
            out[position] = value
        return out

    def code(self, code: types.CodeType, units: list, *, qualname: str, exceptions: bytes,
             locations: bytes) -> types.CodeType:
        return self._replace(code, co_code=bytes(b for unit in units for b in unit), co_qualname=qualname,
                             co_stacksize=code.co_stacksize + len(self.kinds) + 2, co_exceptiontable=exceptions,
                             co_linetable=locations)


def _localsplus(code: types.CodeType) -> list:
    """The names of the frame's local slots by index (varnames, the cells that are not
    arguments, free variables), as local and cell opargs number them."""
    count = len(code.co_varnames) + len(set(code.co_cellvars) - set(code.co_varnames)) + len(code.co_freevars)
    return [code._varname_from_oparg(k) for k in range(count)]


def _function(code: types.CodeType, fn: types.FunctionType) -> types.FunctionType:
    return types.FunctionType(code, fn.__globals__, code.co_name, None, fn.__closure__)


def resume_function(fn: types.FunctionType, layout: Layout, target: int, line: int) -> types.FunctionType:
    """fn's code resumed before instruction `target`, from `layout`'s arguments."""
    code = fn.__code__
    listed = instructions(code)
    prologue = layout.prologue(code)
    # The jump over the code before `target`: its EXTENDED_ARGs change its own length.
    jump = []
    for _ in range(4):
        after = len(prologue) + len(jump)
        jump = _encode(_OP["JUMP_FORWARD"], len(prologue) + len(jump) + listed[target].offset // 2 - after)
        if len(prologue) + len(jump) == after:
            break
    head = prologue + jump
    units = head + _renumbered(_units(code), layout.mapping)
    exceptions = _exception_table([(s + len(head), e + len(head), t + len(head), d)
                                   for s, e, t, d in _exception_entries(code)])
    locations = _location_entries(len(head), None) + code.co_linetable
    qualname = f"{code.co_qualname}.<resumed at line {line}>"
    resumed = _function(layout.code(code, units, qualname=qualname, exceptions=exceptions, locations=locations), fn)
    resumed.head = len(head)  # code units before the frame's own code
    return resumed


def glue_function(fn: types.FunctionType, layout: Layout, start: int, end: int, produced: int,
                  line: int) -> types.FunctionType:
    """Instructions [start, end] of fn's code run over `layout`'s stack (the slots they may
    touch), returning the `produced` slots then on the stack's top, as a tuple."""
    code = fn.__code__
    listed = instructions(code)
    first = listed[start].offset // 2
    last = listed[end].offset // 2 + 1 + _caches(listed[end].opcode)
    plain = without_null(listed[end])
    if plain is None:
        body = _renumbered(_units(code)[first:last], layout.mapping)
    else:  # the refused load in its form without the NULL (the caller puts it back)
        prefix = end
        while prefix > start and listed[prefix - 1].opname == "EXTENDED_ARG":
            prefix -= 1
        body = _renumbered(_units(code)[first:listed[prefix].offset // 2], layout.mapping) + _encode(*plain)
        produced -= 1
    units = layout.prologue(code) + body + _encode(_OP["BUILD_TUPLE"], produced) + _encode(_OP["RETURN_VALUE"])
    # The line of the frame's own instruction run here (what a log record or a warning's
    # stacklevel reads), not the break's, which may be inside a function it calls.
    own = listed[end].positions.lineno if listed[end].positions and listed[end].positions.lineno else None
    line = own or line
    locations = _location_entries(len(units), line - code.co_firstlineno)
    qualname = f"{code.co_qualname}.<graph break at line {line}>"
    return _function(layout.code(code, units, qualname=qualname, exceptions=b"", locations=locations), fn)


def without_null(ins) -> tuple | None:
    """(opcode, oparg) of a load that may push the call protocol's NULL (a tuple cannot hold
    it) in the form that pushes only its value: LOAD_GLOBAL's and 3.12 LOAD_ATTR's and
    LOAD_SUPER_ATTR's low bit cleared, 3.11's LOAD_METHOD as LOAD_ATTR. None for others."""
    method_bit = ("LOAD_GLOBAL", "LOAD_ATTR", "LOAD_SUPER_ATTR") if sys.version_info >= (3, 12) else ("LOAD_GLOBAL",)
    if ins.opname in method_bit and ins.arg & 1:
        return ins.opcode, ins.arg & ~1
    if ins.opname == "LOAD_METHOD":
        return _OP["LOAD_ATTR"], ins.arg
    return None


def stack_depths(code: types.CodeType) -> dict:
    """The value stack's depth before each instruction (by offset), as CPython's compiler
    computes it: from the entry and each exception handler, through every successor."""
    listed = instructions(code)
    at = {i.offset: k for k, i in enumerate(listed)}
    depth, work = {0: 0}, [0]
    for _, _, target, depth_lasti in _exception_entries(code):
        offset = target * 2
        depth[offset] = (depth_lasti >> 1) + (depth_lasti & 1) + 1  # lasti, then the exception
        work.append(offset)
    ends = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD", "JUMP_BACKWARD",
            "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT"}
    while work:
        offset = work.pop()
        k = at.get(offset)
        if k is None:
            continue
        ins = listed[k]
        arg = ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None
        successors = []
        if ins.opname not in ends and k + 1 < len(listed):
            successors.append((listed[k + 1].offset, dis.stack_effect(ins.opcode, arg, jump=False)))
        if ins.opcode in _JUMPS:
            successors.append((ins.argval, dis.stack_effect(ins.opcode, arg, jump=True)))
        for target, effect in successors:
            if target not in depth:
                depth[target] = depth[offset] + effect
                work.append(target)
    return depth


# ---- a break, continued ------------------------------------------------------------------------

def _is_call(opname: str) -> bool:
    return opname in ("CALL", "CALL_FUNCTION_EX")


# How many value-stack slots an instruction reads from the top (pops, or peeks below).
_FIXED = {"LOAD_ATTR": 1, "LOAD_METHOD": 1, "BINARY_SUBSCR": 2, "BINARY_OP": 2, "COMPARE_OP": 2,
          "CONTAINS_OP": 2, "IS_OP": 2, "UNARY_NEGATIVE": 1, "UNARY_NOT": 1, "UNARY_INVERT": 1,
          "UNARY_POSITIVE": 1, "STORE_ATTR": 2, "DELETE_ATTR": 1, "STORE_SUBSCR": 3, "DELETE_SUBSCR": 2,
          "GET_ITER": 1, "UNPACK_SEQUENCE": 1, "UNPACK_EX": 1, "STORE_GLOBAL": 1, "BINARY_SLICE": 3,
          "STORE_SLICE": 4, "BEFORE_WITH": 1, "GET_LEN": 1, "CALL_INTRINSIC_1": 1, "LOAD_SUPER_ATTR": 3,
          "IMPORT_NAME": 2, "IMPORT_FROM": 1, "LOAD_GLOBAL": 0, "LOAD_CONST": 0, "LOAD_FAST": 0,
          "LOAD_FAST_CHECK": 0, "LOAD_DEREF": 0, "LOAD_CLASSDEREF": 0, "LOAD_ASSERTION_ERROR": 0,
          "LOAD_BUILD_CLASS": 0, "STORE_DEREF": 1, "DELETE_DEREF": 0, "DELETE_GLOBAL": 0, "NOP": 0,
          "RETURN_VALUE": 1, "KW_NAMES": 0, "PRECALL": 0, "EXTENDED_ARG": 0, "CHECK_EXC_MATCH": 2}
_BY_ARG = {"BUILD_TUPLE": 0, "BUILD_LIST": 0, "BUILD_SET": 0, "BUILD_STRING": 0, "BUILD_SLICE": 0,
           "RAISE_VARARGS": 0, "COPY": 0, "SWAP": 0, "BUILD_CONST_KEY_MAP": 1, "LIST_APPEND": 1,
           "SET_ADD": 1, "LIST_EXTEND": 1, "SET_UPDATE": 1, "DICT_UPDATE": 1, "DICT_MERGE": 1, "MAP_ADD": 2}


def reads(ins) -> int | None:
    """How many slots from the stack's top `ins` reads; None for one kiln does not know."""
    if ins.opname in _FIXED:
        return _FIXED[ins.opname]
    if ins.opname in _BY_ARG:
        return ins.arg + _BY_ARG[ins.opname]
    if ins.opname == "BUILD_MAP":
        return 2 * ins.arg
    if ins.opname == "FORMAT_VALUE":
        return 2 if ins.arg & 0x04 else 1
    if ins.opname == "MAKE_FUNCTION":
        return 1 + bin(ins.arg & 0x0F).count("1") + (1 if sys.version_info < (3, 11) else 0)
    if ins.opname == "CALL":
        return ins.arg + 2
    if ins.opname == "CALL_FUNCTION_EX":
        return 3 + (ins.arg & 1)
    return None


def _taking(layout: Layout, n: int, m: int, keep: int = 0):
    """A function of a pool of the stack's `n` slots, the `m` live locals and the cells (a
    tuple) to `layout`'s arguments, for a stack whose slots below `keep` are not passed
    (only values and NULLs: no iterators)."""
    given = ([k for k, kind in zip(range(keep, n), layout.kinds) if kind != "null"] +
             list(range(n, n + m)) + list(range(n + m, n + m + len(layout.code_cells))))
    out = [0] * len(given)
    for source, position in zip(given, layout.order):
        out[position] = source
    if len(out) == 1:
        return lambda pool: (pool[out[0]],)
    return operator.itemgetter(*out) if out else lambda pool: ()


def _untouched(stack_nulls: tuple, listed: list, end: int) -> int:
    """How many of the stack's bottom slots the refused instruction leaves alone: those
    below what it reads. A NULL the rest leaves would be handed back in a tuple, which
    cannot hold one (only a call consumes its NULL)."""
    ins = listed[end]
    keep = len(stack_nulls) - reads(ins)
    if ins.opname not in ("CALL", "CALL_FUNCTION_EX") and any(stack_nulls[keep:]):
        raise RuntimeError(f"kiln: a graph break's eager part at {ins.opname} would return a NULL")
    return keep


class Continuation:
    """What runs after one graph break of a compiled frame: the refused instructions (glue),
    then the resume function, compiled by `compile_resume(fn)`; both made once per stack
    layout and set of passed locals."""

    def __init__(self, fn: types.FunctionType, brk: dict, compile_resume, made: dict, offer):
        self.fn = fn
        self.offer = offer  # the frame hook's callback while the glue runs (kiln._kiln.call_offering)
        self.brk = brk
        self.compile_resume = compile_resume
        self.listed = instructions(fn.__code__)
        self.index = {i.offset: k for k, i in enumerate(self.listed)}
        self.instruction = self.listed[brk["instruction"]]
        self.names = tuple(item["name"] for item in brk["locals"])
        self.n, self.m = len(brk["stack"]), len(brk["locals"])
        self.plan = None  # set by the first call whose layouts do not depend on its values
        if set(self.names) & set(fn.__code__.co_cellvars):  # a cell's value is passed as its cell
            raise Unsupported(f"{brk['reason']}; no graph break there: the cells "
                              f"{sorted(set(self.names) & set(fn.__code__.co_cellvars))} are live as locals too",
                              brk["filename"], brk["line"])
        self.where = f"{brk['filename']}:{brk['line']}"
        # Inside a try or with block, what the eager part raises goes to the block's handler,
        # where the rest resumes (the handler's stack: its depth, lasti, the exception).
        self.handler = _handler(fn.__code__, self.listed[brk["start"]].offset)
        op = self.instruction.opname
        if not op.startswith(_CONDITIONAL) and op not in ("RETURN_VALUE", "RETURN_CONST") and reads(self.instruction) is None:
            raise Unsupported(f"{brk['reason']}; no graph break there: kiln does not know what {op} reads",
                              brk["filename"], brk["line"])
        # The glue runs through the POP_TOPs after the refused instruction (a call made for its
        # effect): its result is dropped there, not passed to (and guarded by) the resume function.
        self.end = brk["instruction"]
        if not op.startswith(_CONDITIONAL) and without_null(self.instruction) is None:
            while self.end + 1 < len(self.listed) and self.listed[self.end + 1].opname == "POP_TOP":
                self.end += 1
        self.private_stack = tuple("iterator" in spec for spec in brk["stack"])
        self.private_locals = tuple("iterator" in item["value"] for item in brk["locals"])
        # The code objects of the functions the traced code made that the state holds.
        self.codes = {}
        for made in _made_functions(brk):
            key = (made["qualname"], made["firstLine"])
            code = _nested_code(fn.__code__, *key)
            if code is None:
                raise Unsupported(f"{brk['reason']}; no graph break there: {made['qualname']} is not the "
                                  "frame's own code", brk["filename"], brk["line"])
            self.codes[key] = code
        # Code run over a stack of another depth than CPython's would crash the interpreter:
        # the tracer's stack is checked against the compiler's depths at both ends of the break.
        self.depths = stack_depths(fn.__code__)
        if self.depths.get(self.listed[brk["start"]].offset) != len(brk["stack"]):
            raise Unsupported(f"{brk['reason']}; no graph break there: kiln's value stack has "
                              f"{len(brk['stack'])} items where CPython's has "
                              f"{self.depths.get(self.listed[brk['start']].offset)}", brk["filename"], brk["line"])
        # Glue and resume functions by what they are made of: shared by the frame's entries
        # (a recompile of the frame finds the resume functions it compiled before).
        self.made = made

    def __call__(self, values: tuple):
        plan = self.plan
        if plan is not None:  # the layouts of the last call, where nothing in them can change
            keep, glue, glue_take, put_null, resume, resume_take = plan
            pool = (*values[:self.n + self.m], *self._cells(values)) if self.brk["cells"] else values
            top = _kiln.call_offering(self.offer, glue.__code__, glue, glue_take(pool), None)
            if put_null:
                top = (*top[:-1], NULL, top[-1])
            if not top or not any(type(v) in _ITERATORS for v in top):
                pool = (*values[:keep], *top, *pool[self.n:])
                return resume._run(resume_take(pool), {})  # kiln's machinery: not offered
            stack = [*values[:keep], *top]
            own = [False] * keep + [type(v) in _ITERATORS and not any(v is g for g in pool) for v in top]
            return self._resume_at(stack, own, list(values[self.n:self.n + self.m]), list(pool[self.n + self.m:]),
                                   self.end + 1, None)[1]
        brk, ins = self.brk, self.instruction
        n, m = self.n, self.m
        stack, locals_ = list(values[:n]), values[n:n + m]
        cells = self._cells(values)
        if self.codes:
            named = {c["name"]: cell for c, cell in zip(brk["cells"], cells)}
            stack = [self._function(v, named) for v in stack]
            locals_ = [self._function(v, named) for v in locals_]
            for cell, c in zip(cells, brk["cells"]):
                if c["isSet"] and not c["isCell"]:
                    cell.cell_contents = self._function(cell.cell_contents, named)
        opname = ins.opname
        if opname == "RETURN_VALUE":
            return stack[-1]
        if opname == "RETURN_CONST":  # 3.12: a return the tracer refused (a function of no tensor)
            return ins.argval
        # The eager part gets every iterator as it is (it may advance one); the resume function
        # gets the frame's own as what they have left.
        own = [self.private_stack[k] if k < len(self.private_stack) else False for k in range(len(stack))]
        values_only = ("value",) * len(locals_)
        raised = None
        glue = None
        try:
            if opname.startswith(_CONDITIONAL):
                value = stack[-1]
                if "NONE" in opname:
                    taken = (value is None) != ("NOT_NONE" in opname)
                else:
                    taken = bool(value) == ("IF_TRUE" in opname)
                target = self.index[ins.argval] if taken else brk["instruction"] + 1
                if not (taken and opname.startswith("JUMP_IF")):
                    stack.pop()
                    own.pop()
            else:
                kinds = slot_kinds(stack)
                keep = _untouched(tuple(kind == "null" for kind in kinds), self.listed, brk["instruction"])
                glue = self._glue(kinds[keep:], values_only)
                given = glue.layout.arguments(stack[keep:], locals_, cells)
                # What the glue calls is offered to kiln: a break inside a called function
                # costs that call's break, the callee a frame of its own.
                top = list(_kiln.call_offering(self.offer, glue.__code__, glue, tuple(given), None))
                put_null = without_null(ins) is not None
                if put_null:  # its value with the NULL the plain form left out
                    top.insert(len(top) - 1, NULL)
                # An iterator the eager part made (GET_ITER over a list) is the frame's own; one
                # it was given (iter() of an iterator is itself) is not.
                made = [type(v) in _ITERATORS and not any(v is g for g in given) for v in top]
                stack, own = stack[:keep] + list(top), own[:keep] + made
                target = self.end + 1
        except BaseException as e:  # the frame's own handler takes it, as it would have
            if self.handler is None:
                raise
            handler, depth, lasti = self.handler
            raised, target = e, self.index[handler]
            stack = stack[:depth] + ([0] if lasti else []) + [e]
            own = own[:depth] + [False] * (len(stack) - depth)
        resume = self._resume_at(stack, own, locals_, cells, target, raised)
        if glue is not None and raised is None and not self.codes and not any(own) and \
                not any(self.private_locals) and self.handler is None:
            # Nothing of this call's layouts depends on its values: later calls take them as they are.
            self.plan = (keep, glue, _taking(glue.layout, n, m, keep), put_null, resume[0],
                         _taking(resume[0].layout, len(stack), m))
        return resume[1]

    def _cells(self, values: tuple) -> list:
        """The frame's cells, one object each for the glue and the resume function (a closure
        the glue makes and the rest of the code share them)."""
        if not self.brk["cells"]:
            return []
        return [v if c["isCell"] else types.CellType(v) if c["isSet"] else types.CellType()
                for c, v in zip(self.brk["cells"], values[self.n + self.m:])]

    def _resume_at(self, stack: list, own: list, locals_, cells: list, target: int, raised):
        """The rest of the frame from instruction `target` over that state: (the resume
        function, what it returned)."""
        if self.depths.get(self.listed[target].offset) != len(stack):
            raise RuntimeError(f"kiln: the value stack after the graph break at {self.where} has {len(stack)} items "
                               f"where CPython's has {self.depths.get(self.listed[target].offset)}")
        resume = self._resume(slot_kinds(stack, tuple(own)), slot_kinds(locals_, self.private_locals), target)
        if raised is not None and self.handler[2]:
            # lasti: where the handler's RERAISE says the exception came from, for tracebacks
            stack[-2] = resume.head + self.instruction.offset // 2
        return resume, resume(*resume.layout.arguments(stack, locals_, cells))

    def _function(self, value, cells: dict):
        """`value` with the functions made in the traced code it holds made for real (in
        tuples and lists too), their closures over this call's cells."""
        if isinstance(value, MadeFunction):
            f = value.spec
            closure = tuple(cells[c["frameCell"]] if "frameCell" in c else
                            self.fn.__closure__[c["freeCell"]] if "freeCell" in c else
                            types.CellType() if "empty" in c else
                            types.CellType(self._function(contents, cells))
                            for c, contents in zip(f["closure"], value.contents))
            code = self.codes[(f["qualname"], f["firstLine"])]
            made = types.FunctionType(code, self.fn.__globals__, code.co_name,
                                      tuple(self._function(d, cells) for d in value.defaults) or None, closure or None)
            if value.kwdefaults:
                made.__kwdefaults__ = {k: self._function(v, cells) for k, v in value.kwdefaults.items()}
            return made
        if type(value) in (list, tuple):
            items = [self._function(v, cells) for v in value]
            return value if all(a is b for a, b in zip(items, value)) else type(value)(items)
        return value

    def _glue(self, kinds: tuple, local_kinds: tuple):
        key = ("glue", self.brk["start"], self.end, kinds, self.names, local_kinds)
        if key not in self.made:
            code = self.fn.__code__
            layout = Layout(code, kinds, self.names, local_kinds)
            effect = sum(dis.stack_effect(i.opcode, i.arg) if i.opcode >= dis.HAVE_ARGUMENT
                         else dis.stack_effect(i.opcode)
                         for i in self.listed[self.brk["start"]:self.end + 1])
            glue = glue_function(self.fn, layout, self.brk["start"], self.end, len(kinds) + effect, self.brk["line"])
            glue.layout = layout
            self.made[key] = glue
        return self.made[key]

    def _resume(self, kinds: tuple, local_kinds: tuple, target: int):
        key = ("resume", target, kinds, self.names, local_kinds)
        if key not in self.made:
            layout = Layout(self.fn.__code__, kinds, self.names, local_kinds)
            line = self.brk["line"]
            resumed = resume_function(self.fn, layout, target, line)
            compiled = self.compile_resume(resumed)
            compiled.layout = layout
            compiled.head = resumed.head
            self.made[key] = compiled
        return self.made[key]

