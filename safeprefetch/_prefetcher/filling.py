"""What a source's ``fetch_into(index, out)`` did to the slot, judged before the slot is published.

``fetch_into`` fills the worker's preallocated slot in place, with no per-batch allocation. Its return
value is a convention the library does not control. Sources return ``None``, a count (``readinto``'s
way), a status (``True``, ``"ok"``), ``out`` itself or a view of it, or a new array written as if
``__getitem__`` were meant. Most of these are fine. The rest leave the slot holding an earlier batch's
bytes, and a prefetcher that published it would hand over silently wrong data. Four cases do that:

* a short count;
* a view of only part of ``out``;
* a failure status;
* a fetch not finished when ``fetch_into`` returned: a coroutine (an ``async def fetch_into``), a
  generator, a future.

:func:`fill_into` calls the source and tells which case it is. It returns a message for the caller to
raise with the item's position, and the slot is never published. Where the value is ambiguous (a 0-d
batch, whose label may be the returned value itself) the call is refused rather than guessed. The rules
are listed in its docstring, and each one came from a source that delivered wrong data (docs/hardening.md,
rounds 16, 18, 19 and 21).
"""

from __future__ import annotations

import array
import inspect
import threading
import types
from typing import Any, Callable

import numpy as np

__all__ = ["fill_into"]


def fill_into(fetch_into: Callable[[int, np.ndarray], Any], index: int, slot: np.ndarray) -> str | None:
    """Call a source's ``fetch_into(index, out)`` on a view of its own of ``slot``, and never deliver garbage:
    what is wrong, for the caller to raise with the item's position, or None.

    * A view whose dtype the source changed (``out.dtype = ...``): the bytes written mean something else in
      the slot. Refused. Setting its shape (``out.shape = -1``) is fine: the same bytes in the same order.
    * An array returned: what it returns is not ``out``'s business, unless it is a batch. One of the batch's
      shape and dtype is copied into the slot (a source written as if it were ``__getitem__`` left ``out``
      as it was, and the slot's old bytes were delivered; one that wrote ``out`` and returns what it wrote
      pays one more copy). A 0-d one (a count) or an empty one of its own is ignored, but where the batch is
      0-d: there a numpy 0-d value is refused unless ``out`` holds that same value (the batch, or a count,
      cannot be told apart); any other array is refused, as a batch of the wrong shape or dtype would be.
    * ``out`` or a view of the whole of it (a ``memoryview``, a tensor over it, ``out.reshape(-1)``) is fine;
      a view of part of it, empty or not (``return out[:n]``, what a short read filled), is refused: the
      rest of the slot holds an earlier batch's bytes.
    * What numpy reads as an array (a list, a tuple or a ``memoryview`` of numbers, an ``array.array``, a
      tensor, a float) is judged as that array: a view of ``out`` as above, a batch is copied in, anything
      else refused (a batch returned as a list, ``out`` left as it was, delivered the slot's old bytes).
      A string, a dict, a tuple of mixed values, ``True`` is a status: ignored. ``False`` (a Python or numpy
      bool) where the batch cannot be a bool is a failure, refused; so is a pair that starts with ``False``
      (``ok, image``, OpenCV's way); after ``True`` its second item is judged as if returned alone.
    * A coroutine or other awaitable, a generator, a future (``done`` and ``result``): the fetch was not
      finished when the call returned (``async def fetch_into`` filled nothing, and a future's thread wrote
      the slot after it was published: every batch was the slot's old bytes). Refused.
    * An integer (a Python int, or a numpy one where the batch is not 0-d) is a count, readinto's way: it
      must say out was filled whole, in bytes, values or rows (``out.nbytes``, ``out.size``,
      ``len(out)``). A short count (a short read, 0 at the end of a file) is refused: the rest of the
      slot holds an earlier batch's bytes. (A short byte count that happens to equal the values or the
      rows cannot be told from a whole count of those: the units are not said.) Where the batch is 0-d,
      a Python int is the batch as often as a count (``return self.labels[i]``, out left as it was,
      delivered the slot's old label): it is fine if the call changed out's bytes or out holds that
      value, and refused otherwise (a source that writes out the value it held already and returns a
      count is refused too: it should return None).

    The hot path of every fetch: a view, a rank test, the call, an identity test and a type test (a view
    shares its base's dtype object until someone sets its dtype).
    """
    out = slot[...]  # a view of its own: setting its shape or dtype leaves the slot's kept view alone
    before = slot.tobytes() if not slot.ndim else None  # a 0-d batch: did the call write it? (an int returned)
    returned = fetch_into(index, out)
    if out.dtype is not slot.dtype and out.dtype != slot.dtype:
        return (f"fetch_into changed out's dtype to {out.dtype} (the batches are {slot.dtype}): write the batch "
                "into out, in its own dtype")
    if returned is None:
        return None
    if (type(returned) in (tuple, list) and len(returned) == 2 and isinstance(returned[0], (bool, np.bool_))
            and not isinstance(returned[1], (bool, np.bool_)) and slot.ndim):
        # A status and what was read (``ok, image``, OpenCV's way): False is a failure, never a batch; with
        # True, what comes with it is judged as if returned alone (a new array: the batch, copied in). (Two
        # bools are a bool batch's two values, judged as an array.)
        if not returned[0]:
            return _failed(f"({returned[0]!r}, ...)")
        return None if returned[1] is None else _returned_problem(returned[1], slot, before)
    return _returned_problem(returned, slot, before)


def _returned_problem(returned: Any, slot: np.ndarray, before: Any) -> str | None:
    """``fill_into``'s judgement of what the call returned (not None): what is wrong, or None."""
    shown = "an array"
    if not isinstance(returned, np.ndarray):
        if isinstance(returned, int):
            if returned.__class__ is bool:
                # A status (True: done), where it cannot be the batch; where the batch is 0-d it can be (a bool
                # label returned, out left alone), and judged by out's bytes the refusal depended on the labels.
                # False where it cannot be the batch is a failure: the slot holds an earlier batch's bytes.
                return (None if returned else _failed(repr(returned))) if slot.ndim else (
                    f"fetch_into returned {returned!r} for a 0-d batch, where a bool may be the label itself: "
                    "write the value into out (out[...] = value) and return None")
            return _count_problem(returned, slot, before)
        if isinstance(returned, np.integer) and slot.ndim:
            return _count_problem(int(returned), slot, None)
        if _unfinished(returned):
            return _unfinished_problem(returned)
        shown = f"an object of type {type(returned).__name__!r}"
        value, returned = returned, _array_like(returned, slot.dtype)
        if returned is None:
            # A status (a string, a dict, a tuple of mixed values): nothing that could be the batch -- but
            # where the batch is 0-d, a value numpy converts to its dtype (a datetime, a Decimal) returned
            # with out left as it was is the batch, written like __getitem__: refused, as an int is.
            return _scalar_problem(value, slot, before) if not slot.ndim else None
    elif isinstance(returned, np.ma.MaskedArray):  # (out itself, masked, too: the mask says which are invalid)
        return ("fetch_into returned a numpy.ma.MaskedArray: its mask would be dropped; fill out with the data "
                "(out[...] = batch.filled(value)) and return None")
    if slot.ndim == 0 and returned.ndim == 0:
        # A 0-d batch (a label stream): a numpy 0-d value or a Python float returned is the batch (``return
        # self.y[i]``, written like __getitem__, left out as it was: every label was 0) or a count (out
        # written): which, no test can tell. Equal to what out holds, it is either; otherwise it is refused,
        # never guessed.
        if _same_value(returned, slot):
            return None
        return (f"fetch_into returned {returned[()]!r} where out holds {slot[()]!r}: for a 0-d batch write the "
                "value into out (out[...] = value) and return None (or a Python int)")
    if returned.ndim == 0:
        if returned.dtype.kind in "iu":
            return _count_problem(int(returned), slot, None)
        if returned.dtype.kind == "b":
            return None if returned else _failed(repr(returned[()]))  # a status, as a Python bool is
        return (f"fetch_into returned the 0-d value {returned[()]!r}, neither a count nor out nor a batch (shape "
                f"{slot.shape} dtype {slot.dtype}): fill out in place (out[...] = batch) and return None")
    if returned.size == 0:
        # An empty view of out is a read of nothing (``return out[:0]`` at the end of a file): the slot holds an
        # earlier batch. An empty array of its own says nothing of out: ignored, as a count of it would be.
        return _partial(returned, slot) if slot.size and _owner(returned) is _owner(slot) else None
    if np.shares_memory(returned, slot):
        # out, or a view of the whole of it (a memoryview of out, a tensor over it); a view of part of it is
        # what was read (``return out[:n]``), and the rest of the slot holds an earlier batch's bytes.
        whole = returned.nbytes == slot.nbytes and _bounds(returned) == _bounds(slot)  # (``out[::2]``: not whole)
        return None if whole else _partial(returned, slot)
    if returned.shape == slot.shape and returned.dtype == slot.dtype:
        np.copyto(slot, returned, casting="no")
        return None
    return (f"fetch_into returned {shown} of shape {returned.shape} dtype {returned.dtype}, neither out "
            f"nor a batch (shape {slot.shape} dtype {slot.dtype}): fill out in place (out[...] = batch)")


def _unfinished(returned: Any) -> bool:
    """Whether ``returned`` is a fetch still under way: a coroutine (an ``async def fetch_into``, called and never
    run) or another awaitable, a generator (a ``yield`` in the body: none of it ran), a future (``done`` and
    ``result``: the read handed to another thread, which may write the slot after it is published), a
    ``multiprocessing`` pool's ``AsyncResult`` (``ready``, ``wait`` and ``get``) or a thread. None is a status."""
    if (inspect.isawaitable(returned) or isinstance(returned, (types.GeneratorType, types.AsyncGeneratorType,
                                                               threading.Thread))):
        return True
    if callable(getattr(returned, "done", None)) and callable(getattr(returned, "result", None)):
        return True
    return all(callable(getattr(returned, name, None)) for name in ("ready", "wait", "get"))


def _unfinished_problem(returned: Any) -> str:
    if inspect.iscoroutine(returned) or isinstance(returned, types.GeneratorType):
        returned.close()  # never run: closed here (a coroutine never awaited warns when collected)
    return (f"fetch_into returned {type(returned).__name__!r}, a fetch not finished when it returned (an async def "
            "fetch_into, a yield in it, or work left running on another thread): the slot would deliver an earlier "
            "batch's bytes; fill out before fetch_into returns (wait for the work inside it) and return None")


def _failed(shown: str) -> str:
    return (f"fetch_into returned {shown}: a failure, with out not (or not all) written, and the slot would "
            "deliver an earlier batch's bytes; raise an exception for a batch that cannot be read")


def _partial(view: np.ndarray, slot: np.ndarray) -> str:
    return (f"fetch_into returned a view of part of out ({view.nbytes} of its {slot.nbytes} bytes): the rest "
            "of the slot would hold an earlier batch's bytes; fill out whole (a short read is an error to raise) "
            "and return None")


def _owner(a: Any) -> Any:
    """The object whose memory an array views: its last base, through arrays and memoryviews."""
    while True:
        base = a.base if isinstance(a, np.ndarray) else a.obj if isinstance(a, memoryview) else None
        if base is None:
            return a
        a = base


_byte_bounds = getattr(getattr(np.lib, "array_utils", None), "byte_bounds", None) or np.byte_bounds


def _bounds(a: np.ndarray) -> tuple[int, int]:
    return tuple(_byte_bounds(a))


def _count_problem(count: int, slot: np.ndarray, before: Any) -> str | None:
    """What is wrong with ``count``, returned by a ``fetch_into`` as how much of ``slot`` it wrote; or None.
    ``before``: a 0-d slot's bytes before the call (bytes: a NaN is not equal to itself)."""
    if slot.ndim == 0:  # out holds that value (either reading is right), or the call wrote out: a count
        return _scalar_problem(count, slot, before)
    if count in (slot.nbytes, slot.size, slot.shape[0]):
        return None
    return (f"fetch_into returned {count}, a count that is not out's whole ({slot.nbytes} bytes, {slot.size} "
            f"values, {slot.shape[0]} rows): the rest of the slot would hold an earlier batch's bytes; fill "
            "out whole (a short read is an error to raise) and return None")


def _scalar_problem(value: Any, slot: np.ndarray, before: bytes | None) -> str | None:
    """What is wrong with ``value`` (an int, or what numpy reads only as an object), returned for the 0-d batch
    ``slot``; None when the call wrote out, or out holds that value, or it cannot be a batch (not convertible
    to the batch's dtype: a status; an int that is not, say 300 for int8, is no status but not out's value)."""
    if slot.tobytes() != before:
        return None
    try:
        converted = np.asarray(value, dtype=slot.dtype)
        if converted.shape != () or bool(converted == slot[()]):
            return None
    except Exception:  # noqa: BLE001 - not convertible to the batch's dtype
        if not isinstance(value, int):
            return None
    return (f"fetch_into returned {value!r} where out holds {slot[()]!r}, as before the call: for a 0-d batch "
            "write the value into out (out[...] = value) and return None")


def _array_like(value: Any, batch: np.dtype) -> np.ndarray | None:
    """What a ``fetch_into`` returned, as an array, when it could be a batch of dtype ``batch``: a numpy
    scalar, a float, a list or tuple of numbers, anything with a buffer or ``__array__`` (a ``memoryview``,
    an ``array.array``, a tensor; viewed, not copied), and text where the batches are text. None for anything
    else, or for what numpy reads only as objects, text or records where the batches are not of that kind."""
    if isinstance(value, np.generic):
        return np.asarray(value)  # a label of any dtype, judged as the 0-d case judges it
    text = batch.kind in "US"
    if not isinstance(value, (float, complex, list, tuple, memoryview, array.array) + ((str, bytes) if text else ())) \
            and not hasattr(value, "__array__") and not hasattr(value, "__array_interface__"):
        return None
    try:
        got = np.asarray(value)
    except (ValueError, TypeError):  # ragged, or numpy cannot read it: not a batch
        return None
    return None if got.dtype.kind in "OUSV" and got.dtype.kind != batch.kind else got


def _same_value(a: Any, b: np.ndarray) -> bool:
    try:
        return bool(np.asarray(a).dtype == b.dtype and a == b[()])
    except Exception:  # noqa: BLE001 - values numpy cannot compare are not the same
        return False
