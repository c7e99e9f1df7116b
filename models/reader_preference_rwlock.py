"""reader_preference_rwlock: readers enter whenever no writer is writing, so two readers taking turns keep the count above zero and the waiting writer starves.

Source: the first readers-writers problem (Courtois, Heymans and Parnas,
CACM 1971): "no reader shall be kept waiting unless a writer has already
obtained permission" -- the textbook reader-preference lock, and the shape
of many hand-written ``threading.Condition`` read-write locks.

Minimal config: readers=2 writers=1 fairness=strong.

Expected verdict: starvation, even under strong fairness (this model's
setting, as its fix's). Reader 0 enters; the writer announces itself and
waits; reader 1 enters; reader 0 leaves and comes back before reader 1
leaves, and so on: ``readers`` never drops to zero, so nobody notifies the
writer, which sleeps forever. No fairness notion helps: asleep, the writer
is never enabled.

Fix: readers also wait while a writer has announced itself
(``writer_preference_rwlock``).
"""

from safeprefetch.models.writer_preference_rwlock import WriterPreferenceRWLock


class ReaderPreferenceRWLock(WriterPreferenceRWLock):
    name = "reader_preference_rwlock"
    expected = "starvation"
    fix = "writer_preference_rwlock"
    sweep = None
    readers_wait_for_writers = False  # the bug: readers ignore waiting writers
