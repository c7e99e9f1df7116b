// channel: Promela twin of models/channel.py
// config: producers=2 consumers=2 capacity=1 items=1 abandon=on double_close=on
//
// One `atomic` per safeprefetch step, labelled with the step's label.
// The model keeps three tuples (buf, sent, received); since received is
// always a prefix of sent and buf always a suffix of it, the sequence sent
// plus three counters carry exactly the same information.
// Expected: no errors (safeprefetch: ok).

#define CAP    1
#define ITEMS  1
#define NP     2      /* senders:   _pid 0, 1 */
#define NC     2      /* receivers: _pid 2, 3 */
#define NT     4
#define FREE   255    /* mutex owner when free (safeprefetch: -1) */
#define NONE   255

byte sent_seq[NP * ITEMS] = NONE;   /* the item ids sent, in order */
byte nsent, nrecv, nbuf;            /* len(sent), len(received), len(buf) */
byte open_senders = NP, open_receivers = NC;
bool sender_closed[NP], receiver_closed[NC];
bool broken;
byte lock = FREE;
chan not_full = [NT] of { byte };   /* notified after a receive, and (all) when the last receiver closes */
chan not_empty = [NT] of { byte };  /* notified after a send, and (all) when the last sender closes */
bool woken[NT];
hidden byte w;

inline wait(cv, m) {
    atomic { assert(m == _pid); m = FREE; cv!_pid };
    atomic { woken[_pid] && m == FREE -> woken[_pid] = false; m = _pid }
}
inline notify_one(cv) {
    atomic { if :: nempty(cv) -> cv?w; woken[w] = true; w = 0 :: empty(cv) -> skip fi }
}
inline notify_all(cv) {
    atomic { do :: nempty(cv) -> cv?w; woken[w] = true :: empty(cv) -> break od; w = 0 }
}
inline acquire(m) { atomic { m == FREE -> m = _pid } }
inline release(m) { atomic { assert(m == _pid); m = FREE } }

active [NP] proctype sender() {
    byte who = _pid;
    byte left = ITEMS, closes = 0;
lock_:
    if
    :: atomic { lock == FREE && left > 0 -> lock = _pid }; goto check
    :: atomic { lock == FREE && left == 0 -> lock = _pid }; goto close_sender
    fi;
check:
    if
    :: open_receivers == 0 -> goto close_sender           /* BrokenResourceError */
    :: open_receivers > 0 && nbuf == CAP -> goto wait_not_full
    :: open_receivers > 0 && nbuf < CAP -> goto send
    fi;
wait_not_full:
    wait(not_full, lock);
    goto check;
send:
    atomic { sent_seq[nsent] = who * ITEMS + (ITEMS - left); nsent++; nbuf++; left--;
             assert(nbuf <= CAP && open_receivers > 0) };
notify_not_empty:
    notify_one(not_empty);
unlock:
    release(lock);
    goto lock_;
lock_to_close:
    acquire(lock);
close_sender:
    if
    :: atomic { sender_closed[who] -> closes++ }; goto unlock_and_return       /* idempotent */
    :: atomic { !sender_closed[who] && open_senders == 1 ->
           closes++; sender_closed[who] = true; open_senders-- }; goto wake_receivers
    :: atomic { !sender_closed[who] && open_senders != 1 ->
           closes++; sender_closed[who] = true; open_senders-- }; goto unlock_and_return
    fi;
wake_receivers:
    notify_all(not_empty);
unlock_and_return:                                      /* double_close: close each handle twice */
    if
    :: atomic { closes < 2 -> assert(lock == _pid); lock = FREE }; goto lock_to_close
    :: atomic { closes >= 2 -> assert(lock == _pid); lock = FREE }; goto end_done
    fi;
end_done:
    (false)
}

active [NC] proctype receiver() {
    byte who = _pid - NP;
lock_:
    acquire(lock);
check:                                                  /* branches receive | abandon */
    if
    :: (1) -> goto close_receiver                       /* abandon */
    :: nbuf > 0 -> goto receive
    :: nbuf == 0 && open_senders > 0 -> goto wait_not_empty
    :: nbuf == 0 && open_senders == 0 -> goto close_receiver    /* EndOfChannel */
    fi;
wait_not_empty:
    wait(not_empty, lock);
    goto check;
receive:
    atomic { nrecv++; nbuf-- };
notify_not_full:
    notify_one(not_full);
unlock:
    release(lock);
    goto lock_;
close_receiver:
    if
    :: atomic { receiver_closed[who] -> skip }; goto unlock_and_return
    :: atomic { !receiver_closed[who] && open_receivers == 1 ->
           receiver_closed[who] = true; open_receivers--;
           if
           :: nbuf > 0 || open_senders > 0 -> broken = true
           :: else -> assert(nsent == NP * ITEMS && nrecv == nsent)   /* at_end: all delivered */
           fi;
           nbuf = 0 }; goto wake_senders                /* the last receiver discards the buffer */
    :: atomic { !receiver_closed[who] && open_receivers != 1 && nbuf > 0 ->
           receiver_closed[who] = true; open_receivers-- }; goto pass_the_wakeup_on
    :: atomic { !receiver_closed[who] && open_receivers != 1 && nbuf == 0 ->
           receiver_closed[who] = true; open_receivers-- }; goto unlock_and_return
    fi;
wake_senders:
    notify_all(not_full);
    goto unlock_and_return;
pass_the_wakeup_on:
    notify_one(not_empty);
unlock_and_return:
    release(lock);
end_done:
    (false)
}
