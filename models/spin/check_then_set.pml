// check_then_set: Promela twin of models/check_then_set.py
// config: threads=2
//
// One `atomic` per safeprefetch step, labelled with the step's label. The
// model's invariant reads the threads themselves -- where each one is -- and
// so does the twin's: a monitor process asserts, at any point, that the two
// workers are not both at `critical_section` (remote references, the
// Promela way to read another process's program counter).
// Expected: an assertion violation (safeprefetch: invariant).

#define NT     2

bool busy;

active [NT] proctype worker() {
    byte entries;
check_busy:
    if
    :: busy -> goto check_busy
    :: !busy -> goto set_busy
    fi;
set_busy:             /* the bug: not atomic with the check */
    atomic { busy = true; entries++ };
critical_section:
    skip;
leave:
    atomic { busy = false };
end_done:
    (false)
}

active proctype monitor() {
    assert(!(worker[0]@critical_section && worker[1]@critical_section))
}
