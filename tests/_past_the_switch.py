"""A model prelude that counts past the explorer's switch to the generated engine (50,000 states).

``check(Model)`` with the default engine runs the generated transitions only past that many states, and
audits a sample of them: a model whose wrong generated step comes after this count is checked by the
generated engine, where a divergence from the plain engine changes the verdict.
"""


#: Counts, and so states, before the step under test.
N = 70_000
#: The label of the step that comes after the count.
AFTER = "after the count"


def tick(s, me):
    s.c += 1


def tick_guard(s, me):
    return s.c < N


def tick_next(s, me):
    return "tick" if s.c < N else AFTER


def count_past_the_switch(p) -> None:
    """Add the counting step to program ``p`` (the model needs a shared ``c=0``); then ``AFTER`` runs."""
    p.step("tick", tick, guard=tick_guard, next=tick_next, to=["tick", AFTER])
