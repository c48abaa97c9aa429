"""kiln.compile's guard sets go through the shapes service's simplify before they are
stored: fewer shape guards, the same calls served, results as eager."""
import torch

import kiln
from kiln import _kiln


def shape_guards(entry) -> list[str]:
    """An entry's shape guards as text (GuardSet.text() lists them last)."""
    count = len(_kiln.capnp_decode("GuardSet", entry.guards.to_bytes())["shapeGuards"])
    lines = entry.guards.text().splitlines()
    return lines[len(lines) - count:] if count else []


def branches(x):
    if x.shape[0] > 2:
        x = x + 1
    if x.shape[0] > 5:
        x = x * 2
    return x


def test_implied_size_guards_are_not_stored(stack):
    fast = kiln.compile(branches, stack=stack)
    for n in (8, 16, 7, 40):  # 16 turns dim 0 dynamic: one more entry, then hits
        torch.testing.assert_close(fast(torch.ones(n, 3)), branches(torch.ones(n, 3)))
    assert len(fast.cache.entries) == 2
    # Traced: s0 >= 2 (dynamic), s0 > 2 and s0 > 5 (the branches); stored: s0 > 5 alone.
    assert shape_guards(fast.cache.entries[1]) == ["6 <= s0"]
    torch.testing.assert_close(fast(torch.ones(4, 3)), branches(torch.ones(4, 3)))  # fails it: a new entry
    assert len(fast.cache.entries) == 3


def test_simplify_guards_keeps_a_set_without_shape_guards(stack):
    from kiln import guards
    empty = guards.GuardSet()
    assert stack.simplify_guards(empty.to_bytes()) == empty.to_bytes()
