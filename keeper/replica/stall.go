package replica

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"
)

// errLogStalled fails what a member whose log write is stalled would send.
var errLogStalled = errors.New("replica: the log write has not returned for longer than keeper.log_stall_timeout: not replicating")

// stallWatch knows whether the member's Raft log write under way has been
// unanswered for longer than limit: a disk that stopped answering.
//
// hashicorp/raft's leader writes each new entry to its log from its main
// loop, and sends heartbeats from other goroutines (its issues #503 and
// #666). A leader whose disk hangs therefore stops committing but goes on
// telling its followers that it leads, and the shard takes no write until
// the disk answers, on a node every shard the node leads that writes. While
// the watch reports a stall, the quiet transport fails every append and
// snapshot the member would send, heartbeats included: its followers hear
// nothing, elect one of themselves and go on with the entries they have.
// When the write returns the old leader learns of the new term and
// follows. Raft stores entries from its main loop only (a leader's new
// entries, a follower's received ones), so one store is under way at a
// time; the stores serialise compaction's deletes (the snapshot goroutine)
// with it, so a hung delete shows as a hung store.
type stallWatch struct {
	limit  time.Duration // 0: never stalled
	log    *slog.Logger
	since  atomic.Int64 // when the store under way began (ns on stallClock); 0: none
	warned atomic.Int64 // the since of the last store whose stall was logged
}

// stallEpoch makes the watch's times monotonic: a wall clock stepped during
// a write must not make it look stalled, nor hide a stall.
var stallEpoch = time.Now()

// stallClock is the time since stallEpoch, never 0.
func stallClock() int64 { return int64(time.Since(stallEpoch)) + 1 }

// begin records that a log store starts.
func (w *stallWatch) begin() {
	if w != nil {
		w.since.Store(stallClock())
	}
}

// end records that the store under way returned.
func (w *stallWatch) end() {
	if w == nil {
		return
	}
	if since := w.since.Swap(0); since != 0 {
		w.ended(since)
	}
}

// ended logs the end of the stall of the store that began at since, if
// its start was logged and its end not yet.
func (w *stallWatch) ended(since int64) {
	if w.warned.CompareAndSwap(since, 0) {
		w.log.Warn("the Raft log write returned after a stall; replicating again",
			"after", time.Duration(stallClock()-since).Round(time.Millisecond))
	}
}

// overdue returns how long the store under way has run if that is more
// than limit, and 0 otherwise.
func (w *stallWatch) overdue() time.Duration {
	d, _ := w.overdueSince()
	return d
}

// overdueSince is overdue, with the clock reading at which the store
// began.
func (w *stallWatch) overdueSince() (time.Duration, int64) {
	if w == nil || w.limit <= 0 {
		return 0, 0
	}
	since := w.since.Load()
	if since == 0 {
		return 0, 0
	}
	if d := time.Duration(stallClock() - since); d > w.limit {
		return d, since
	}
	return 0, 0
}

// stalled reports whether the store under way began more than limit ago;
// it logs each stall once.
func (w *stallWatch) stalled() bool {
	d, since := w.overdueSince()
	if d == 0 {
		return false
	}
	if w.warned.Swap(since) != since {
		w.log.Error("the Raft log write has not returned: not replicating, so that the followers elect another leader",
			"for", d.Round(time.Millisecond), "log_stall_timeout", w.limit)
		if w.since.Load() != since { // it returned meanwhile, before its start was logged
			w.ended(since)
		}
	}
	return true
}

// logFault keeps the error of the member's last failed Raft log write (a
// store or a delete) until a store succeeds. A log that failed for good
// (the node log refuses every write after a failed one, since what is on
// disk is then unknown) keeps it until the member restarts: the member
// can then neither lead nor keep up, yet it hears its leader's
// heartbeats, so nothing else would show it.
type logFault struct{ err atomic.Pointer[error] }

// record keeps err, or forgets the last one if err is nil.
func (f *logFault) record(err error) {
	if err == nil {
		if p := f.err.Load(); p != nil {
			f.err.CompareAndSwap(p, nil) // not an error recorded meanwhile
		}
		return
	}
	f.err.Store(&err)
}

// last returns the last write's error, nil if it succeeded.
func (f *logFault) last() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}
