import contextlib
import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@contextlib.contextmanager
def recording_runtimes():
    """Every live Runtime a Prefetcher builds inside the block records its steps; yields the list of them."""
    import safeprefetch._prefetcher as prefetcher_module
    from safeprefetch._live import Runtime

    runtimes = []
    real = prefetcher_module.Runtime

    def recording(machine, actions, **kw):
        rt = Runtime(machine, actions, record=True, **kw)
        runtimes.append(rt)
        return rt

    prefetcher_module.Runtime = recording
    try:
        yield runtimes
    finally:
        prefetcher_module.Runtime = real
