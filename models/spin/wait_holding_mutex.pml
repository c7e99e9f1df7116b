// wait_holding_mutex: Promela twin of models/wait_holding_mutex.py
// config: producers=1 consumers=1 capacity=1 items=1
//
// One `atomic` per safeprefetch step, labelled with the step's label.
// A Semaphore is its count; releasing past its bound is an assertion.
// Expected: an invalid end state (safeprefetch: deadlock).

#define CAP    1
#define ITEMS  1
#define FREE   255    /* mutex owner when free (safeprefetch: -1) */

byte count;           /* len(buf) */
byte nrecv;           /* len(received) */
bool took_none;       /* received holds a None: a take found nothing */
byte mutex = FREE;
byte spaces = CAP;    /* bound CAP */
byte items;           /* bound CAP */

active proctype producer() {
    byte left = ITEMS;
spaces_wait:
    atomic { spaces > 0 -> spaces-- };
mutex_wait:
    atomic { mutex == FREE -> mutex = _pid };
buffer_add:
    atomic { count++; left--; assert(count <= CAP) };
mutex_signal:
    atomic { assert(mutex == _pid); mutex = FREE };
items_signal:
    if
    :: atomic { left > 0 -> assert(items < CAP); items++ }; goto spaces_wait
    :: atomic { left == 0 -> assert(items < CAP); items++ }; goto end_done
    fi;
end_done:
    (false)
}

active proctype consumer() {
    byte quota = ITEMS;
mutex_wait:
    atomic { mutex == FREE -> mutex = _pid };
items_wait:         /* the bug: blocks on `items` while holding the mutex the producer needs */
    atomic { items > 0 -> items-- };
buffer_get:
    atomic { if :: count > 0 -> count--; nrecv++ :: else -> took_none = true fi; quota--;
             assert(!took_none) };      /* invariant: a take always finds an item */
mutex_signal:
    atomic { assert(mutex == _pid); mutex = FREE };
spaces_signal:
    if
    :: atomic { quota > 0 -> assert(spaces < CAP); spaces++ }; goto mutex_wait
    :: atomic { quota == 0 -> assert(spaces < CAP); spaces++ }; goto end_done
    fi;
end_done:
    (false)
}
