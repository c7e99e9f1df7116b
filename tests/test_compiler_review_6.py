"""The eleventh review's compiler finding 6 (docs/hardening.md); each test failed before its fix.

A guard that writes a thread local (``me.tries += 1``). The rewrite turns it into ``s[k] += 1``,
which leaves no ``me`` in the body (needs_me False) and no *shared* write in the footprint, so user_steps
takes it for a read-only guard and calls it on the state *tuple* (raw_guard): TypeError, 'tuple' object does
not support item assignment. The plain path runs the same guard on the step's copy and gives a successor.
Either both paths should give that successor, or both should refuse the model with a clear error.
"""
from safeprefetch.model import DONE, Model
from safeprefetch._dsl import specialize


def guard(s, me):
    me.tries += 1
    return s.x < 5


def eff(s, me):
    s.x += 1


class GuardWrites(Model):
    name = "guard_writes_local"

    def build(self, m):
        m.shared(x=0)
        p = m.program("p", tries=0)
        p.step("a", eff, guard=guard, next=DONE)
        m.thread("t", p)


def outcome(enabled, monkeypatch):
    monkeypatch.setattr(specialize, "ENABLED", enabled)
    machine = GuardWrites.compile()
    try:
        return machine.fire(machine.init, 0)
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e)


def test_specialized_guard_matches_plain(monkeypatch):
    plain = outcome(False, monkeypatch)
    fast = outcome(True, monkeypatch)
    assert fast == plain  # failed: the fast path called the guard on the state tuple (TypeError)


# The same shape for invariants (machine.py _fast_invariants): ``raw = fast.__footprint__ is not None`` even when
# the footprint has writes, so an invariant that writes a field is called on the state tuple.

def counting_invariant(s):
    s.checks += 1
    return s.x >= 0


class InvariantWrites(Model):
    name = "invariant_writes"

    def build(self, m):
        m.shared(x=0, checks=0)
        p = m.program("p")
        p.step("a", eff, next=DONE)
        m.thread("t", p)
        m.invariant("x non-negative", counting_invariant)


def test_specialized_invariant_matches_plain(monkeypatch):
    def verdict(enabled):
        monkeypatch.setattr(specialize, "ENABLED", enabled)
        machine = InvariantWrites.compile()
        try:
            return machine.invariant_violation(machine.init)
        except Exception as e:  # noqa: BLE001
            return type(e).__name__, str(e).split(" at ")[0]
    assert verdict(True) == verdict(False)  # failed: the invariant was called on the state tuple
