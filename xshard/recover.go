package xshard

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// UnknownOutcomeError says a transaction's outcome could not be learnt
// before the caller's context ended. The outcome is never guessed: look it
// up later with Outcome and the same id.
type UnknownOutcomeError struct{ ID string }

func (e *UnknownOutcomeError) Error() string {
	return fmt.Sprintf("xshard: outcome of transaction %s not known yet; look it up by id", e.ID)
}

// participantGrace is how long past its deadline a participant waits
// before asking about a record that is already decided (its coordinator
// normally cleans it up sooner).
const participantGrace int64 = 10_000

// recover is run by the leader: it drives every transaction this shard
// coordinates that no driver here is running (a pending one once it is
// older than Takeover), and asks the coordinator about transactions this
// shard holds pending past their deadline.
func (s *Service) recover() {
	self := s.local.Shard()
	now := s.local.Time()
	var waiting *proto.XRecord // a record that waits for official time to pass its deadline or takeover
	for _, rec := range s.local.Records() {
		rec := rec
		switch {
		case rec.Coordinator == self:
			// For a while a pending transaction's own driver (maybe on
			// another member) is still at work.
			if rec.Status == proto.XPending && now <= rec.Deadline && now <= rec.Created+s.Takeover.Milliseconds() {
				waiting = &rec
				continue
			}
		case rec.Status == proto.XPending && now > rec.Deadline:
		case now > rec.Deadline+participantGrace:
		default:
			waiting = &rec
			continue
		}
		if s.finishingHere(rec.ID) {
			continue // answered here; its commits are on their way
		}
		if _, mine := s.claim(rec.ID); !mine {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.release(rec.ID)
			var err error
			if rec.Coordinator == self {
				err = s.resume(&rec)
			} else {
				err = s.ask(&rec)
			}
			if err != nil {
				s.log.Debug("xshard: recovery will retry", "id", rec.ID, "err", err)
			}
		}()
	}
	if waiting != nil && now == s.lastTime {
		s.tick(waiting)
	}
	s.lastTime = now
}

// tick appends an entry that changes nothing, so that the official time of
// a shard that nothing else writes to moves on: it advances only with
// entries, and a record waiting for its deadline would otherwise wait (and
// keep its paths locked) until the next write. The entry is a status query
// with a deadline that never passes, which only reads.
func (s *Service) tick(rec *proto.XRecord) {
	if !s.ticking.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.ticking.Store(false)
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		defer cancel()
		_, err := s.local.Submit(ctx, proto.OpXStatus,
			&proto.XStatusRequest{ID: rec.ID, Coordinator: rec.Coordinator, Deadline: math.MaxInt64})
		if err != nil {
			s.log.Debug("xshard: tick", "err", err)
		}
	}()
}

// resume finishes a transaction this shard coordinates from its record.
func (s *Service) resume(rec *proto.XRecord) error {
	ctx := s.ctx
	s.log.Info("xshard: recovering transaction", "id", rec.ID, "status", rec.Status)
	switch rec.Status {
	case proto.XPending:
		_, err := s.drive(ctx, &proto.XPrepareRequest{ID: rec.ID, Coordinator: rec.Coordinator, Self: rec.Coordinator,
			Shards: rec.Shards, Deadline: rec.Deadline, Ops: rec.Ops, IDs: rec.IDs}, false)
		return err
	case proto.XCommitted:
		_, err := s.finish(ctx, rec.ID, rec.Deadline, rec.Coordinator, rec.Shards, &proto.XTransactionResponse{Status: proto.XCommitted})
		return err
	default:
		_, err := s.finish(ctx, rec.ID, rec.Deadline, rec.Coordinator, rec.Shards, &proto.XTransactionResponse{Status: proto.XFailed})
		return err
	}
}

// ask resolves a participant's record past its deadline with the
// coordinator shard. Participants never decide on their own.
func (s *Service) ask(rec *proto.XRecord) error {
	ctx := s.ctx
	answer := &proto.XRecord{}
	err := s.router.Do(ctx, rec.Coordinator, proto.OpXStatus,
		&proto.XStatusRequest{ID: rec.ID, Coordinator: rec.Coordinator, Shards: rec.Shards, Deadline: rec.Deadline}, answer)
	if err != nil {
		return err
	}
	// A reply without participants comes from what the coordinator remembers
	// of a record it already deleted: nobody will clean up here but us.
	forgotten := finished(answer)
	var op proto.OpCode
	switch answer.Status {
	case proto.XCommitted:
		op = proto.OpXCommit
		if forgotten {
			op = proto.OpXCommitDelete
		}
	case proto.XFailed:
		op = proto.OpXFail
		if forgotten {
			op = proto.OpXDelete
		}
	default:
		return nil // still undecided: the coordinator's recovery will drive it
	}
	if forgotten && rec.Status == proto.XPending {
		// The coordinator deleted its record only after every participant
		// deleted its own: this one is a new record of the id (a late
		// retry's prepare, taken after this shard forgot the transaction),
		// which nobody decided. It goes, and its ops never apply.
		op = proto.OpXDelete
	}
	_, err = s.send(ctx, s.local.Shard(), op, decision(rec.ID, rec.Deadline)(""))
	return err
}
