// transfer_lock_order: Promela twin of models/transfer_lock_order.py
// config: transfers=2
//
// One `atomic` per safeprefetch step, labelled with the step's label. The
// lock each step takes is chosen by expression, as in the model: an index
// into an array of mutexes (transfer i moves from account i%2 to 1-i%2).
// Expected: an invalid end state (safeprefetch: deadlock).

#define FREE   255    /* mutex owner when free (safeprefetch: -1) */

byte lock[2] = FREE;
byte balance[2] = 1;

active [2] proctype transfer() {
    byte src = _pid % 2;
    byte dst = 1 - _pid % 2;
lock_first:           /* the bug: the source's lock first, whichever account that is */
    atomic { lock[src] == FREE -> lock[src] = _pid };
lock_second:
    atomic { lock[dst] == FREE -> lock[dst] = _pid };
move:
    atomic { balance[src]--; balance[dst]++; assert(balance[0] + balance[1] == 2) };
unlock_second:
    atomic { assert(lock[dst] == _pid); lock[dst] = FREE };
unlock_first:
    atomic { assert(lock[src] == _pid); lock[src] = FREE };
end_done:
    (false)
}
