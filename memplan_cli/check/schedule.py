"""The schedule checker: every read and write of every step must fall inside its buffer's lifetime.

Used by the tests on every sample, by profiles after building, and by the plan executor before it
runs a plan. It checks a training graph against intervals that came from elsewhere (a BufferList a
profile produced, or a plain {tensor id: (first, last)} mapping), so a wrong interval anywhere between
the passes and the planner is caught.
"""
from __future__ import annotations


class ScheduleError(AssertionError):
    """A step touches a tensor outside its buffer's interval (a bug in a profile or pass)."""


def check_schedule(tg, intervals, *, require_write_first: bool = True) -> int:
    """Walk `tg.steps`; raise ScheduleError at the first access outside the tensor's interval.

    `intervals` is a BufferList (matched by buffer key: a tensor lives in its alias root's buffer)
    or a dict {tensor id: (first, last)} (an alias is checked against its root's entry when it has
    none of its own). With `require_write_first`, a tensor that is neither persistent nor fed from
    outside must be written (or accumulated into) before a step reads it without writing it. Returns the number of
    accesses checked.
    """
    if hasattr(intervals, "buffers"):
        by_key = {b.ident: (b.first, b.last) for b in intervals.buffers}
        ivs = {t.id: by_key.get(tg.buffer_key(t.id)) for t in tg.tensors}
    else:
        ivs = {t.id: intervals[t.id] if t.id in intervals else intervals.get(tg.root(t.id)) for t in tg.tensors}
    interval = ivs.get

    written: set[int] = set()
    checked = 0
    for s in tg.steps:
        acc = [(t, "reads") for t in s.reads] + [(t, "writes") for t in s.writes]
        acc += [(src, "accumulates from") for src, _, _ in s.accumulate]
        acc += [(dst, "accumulates into") for _, dst, _ in s.accumulate]
        for t, how in acc:
            iv = interval(t)
            if iv is None or not iv[0] <= s.index <= iv[1]:
                name = tg.tensors[t].name
                where = f"step {s.index} ({s.kind} of {s.label or 'op ' + str(s.op)})"
                if iv is None:
                    raise ScheduleError(f"{where} {how} {name}, which has no buffer")
                raise ScheduleError(f"{where} {how} {name} outside its interval [{iv[0]}, {iv[1]}]")
            checked += 1
        if require_write_first:  # a tensor the step also writes may be its scratch (written, then read)
            _check_written(tg, s, [t for t in s.reads if t not in s.writes], written)
        written.update(s.writes)
        written.update(tg.root(t) for t in s.writes)
        if require_write_first:  # accumulation runs after the kernel wrote its contributions
            _check_written(tg, s, [src for src, _, _ in s.accumulate], written)
        written.update(d for _, d, _ in s.accumulate)
    return checked


def _check_written(tg, s, tensors, written):
    for t in tensors:
        if t in tg.persistent or t in tg.fed or t in written or tg.root(t) in written:
            continue
        raise ScheduleError(f"step {s.index} ({s.kind} of {s.label}) reads "
                            f"{tg.tensors[t].name} before any step writes it")
