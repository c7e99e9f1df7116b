"""The real-code checker's twelfth-round review (docs/hardening.md, "A twelfth round").

Each test failed on the code before its fix.
"""

import pytest

from safeprefetch import interleavings

pytestmark = pytest.mark.timeout(120)


async def async_body():
    assert False, "never reached"


def generator_body():
    assert False, "never reached"
    yield


async def async_generator_body():
    assert False, "never reached"
    yield


@pytest.mark.parametrize("body", [async_body, generator_body, async_generator_body])
def test_1_a_body_whose_call_runs_nothing_is_refused_not_ok(body):
    # Before: "ok, exhaustive": one run in which nothing ran.
    with pytest.raises(TypeError, match=f"'{body.__name__}' is an? .*its body would never run"):
        interleavings.check(body)


def test_1_the_decorator_refuses_an_async_test_when_it_decorates():
    # Before: the decorated test passed, whatever its body asserted.
    with pytest.raises(TypeError, match="is an async def"):
        @interleavings.test()
        async def test_async():
            assert False
