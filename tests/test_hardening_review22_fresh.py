"""Fresh-eyes review of round 22's merged commits: what the typed transitions still translate differently.

``runtime='typed'`` promises, for every state, exactly the generated Python function's result (equal, and of
the same types) or a fallback to it. A generator expression's variables are its own scope in Python: after
``all(x > 0 for x in t)`` a local ``x`` of the function still holds what it held before. The typed
translation wrote the generator's loop over the function's own C variable of that name, so the local came
out as the tuple's last item. Each test compares every typed function with its generated twin, type by type
(the helpers of ``test_typed_transitions_review``).
"""

import pytest
from _cython import cython_here
from test_typed_transitions_review import _differences, _one_step

pytestmark = pytest.mark.skipif(not cython_here(), reason="the typed transitions need Cython (the speed extra)")


def generator_shadows_a_local(s, me):
    x = s.a
    ok = all(x > 0 for x in s.t)
    s.a = x
    s.b = ok


def enumerated_generator_shadows_locals(s, me):
    k, v = 5, s.a
    found = any(k == v for k, v in enumerate(s.t))
    s.a = k + v
    s.b = found


def test_a_generators_variable_leaves_the_functions_local_of_that_name_alone():
    model = _one_step("typed_gen_shadow", generator_shadows_a_local, a=7, t=(1, 2, 3), b=False)
    assert _differences(model, [(-4, (), False, "go"), (2, (0, 9), True, "go")]) == []


def test_an_enumerated_generators_variables_leave_the_locals_alone():
    model = _one_step("typed_gen_shadow_enum", enumerated_generator_shadows_locals, a=1, t=(4, 1, 2), b=False)
    assert _differences(model, [(0, (), False, "go"), (9, (9, 9), True, "go")]) == []
