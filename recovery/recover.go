package recovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/xkeeper/xkeeper/movepart"
)

// Outcome is what Recover did about one finding.
type Outcome struct {
	Finding
	Result string `json:"result"`          // what happened
	Err    string `json:"error,omitempty"` // why it did not
}

// Options tune Recover.
type Options struct {
	// Wait is how long a move driven by another live process is waited
	// for (it ends, or its owner's keeper session expires) before it is
	// left alone.
	Wait time.Duration
	// Parallel bounds the moves driven at once; 4 if zero.
	Parallel int
}

// Recover ends every unfinished move (rolled back before its commit point,
// finished after it), deletes stray locks, drops stray staging tables and
// gives security.auth's ACL to xkeeper's znodes that have another.
// It is safe to run beside live moves and beside itself: a move is driven
// only by the process that owns it. It returns what it did, and an audit
// taken afterwards.
func Recover(ctx context.Context, m *movepart.Mover, opt Options) ([]Outcome, *Report, error) {
	if opt.Parallel <= 0 {
		opt.Parallel = 4
	}
	before, err := Audit(ctx, m)
	if err != nil {
		return nil, nil, err
	}
	out := make([]Outcome, len(before.Findings))
	sem := make(chan struct{}, opt.Parallel)
	var wg sync.WaitGroup
	for i, f := range before.Findings {
		out[i].Finding = f
		switch f.Kind {
		case UnfinishedMove:
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				result, err := resume(ctx, m, f.Move, opt.Wait)
				out[i].Result = result
				out[i].setErr(err)
			}()
		}
	}
	wg.Wait()
	// Strays last: a move ended above takes its own lock and table along.
	for i, f := range before.Findings {
		switch f.Kind {
		case StrayLock:
			out[i].Result, err = deleted(m.Store().DeleteStrayLock(ctx, f.Shard, f.Node, f.Move))
		case StrayFence:
			out[i].Result, err = deleted(m.Store().DeleteStrayFence(ctx, f.Shard, f.Node, f.Move))
		case StrayStaging:
			out[i].Result, err = dropStrayStaging(ctx, m, f)
		case OpenACL:
			out[i].Result, err = protect(ctx, m, f)
		default:
			continue
		}
		out[i].setErr(err)
	}
	after, err := Audit(ctx, m)
	return out, after, err
}

func (o *Outcome) setErr(err error) {
	if err != nil {
		o.Err = err.Error()
		if o.Result == "" {
			o.Result = "failed"
		}
	}
}

// resume ends move id, waiting up to wait for a live owner to let go.
func resume(ctx context.Context, m *movepart.Mover, id string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		rec, err := m.Resume(ctx, id)
		var owned *movepart.OwnedError
		switch {
		case errors.Is(err, movepart.ErrNoMove):
			return "already ended", nil
		case errors.As(err, &owned) && time.Now().Before(deadline):
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
			continue
		case errors.As(err, &owned):
			return "left alone: still driven by " + owned.Owner.String(), nil
		case err != nil:
			return "", err
		case rec != nil && rec.Step.Forward():
			return "finished (rolled forward from step " + string(rec.Step) + ")", nil
		case rec != nil:
			return "rolled back from step " + string(rec.Step), nil
		}
		return "already ended", nil
	}
}

// deleted says what the delete of a stray (a lock or a fence that still
// names a move that still does not exist) did.
func deleted(done bool, err error) (string, error) {
	switch {
	case err != nil:
		return "", err
	case !done:
		return "left alone: it changed since the audit", nil
	}
	return "deleted", nil
}

// dropStrayStaging drops a staging table whose move still does not exist.
func dropStrayStaging(ctx context.Context, m *movepart.Mover, f Finding) (string, error) {
	if f.Move != "" {
		if _, err := m.Store().Load(ctx, f.Move, nil); !errors.Is(err, movepart.ErrNoMove) {
			return "left alone: move " + f.Move + " exists now", nil
		}
	}
	t, err := movepart.ParseTableRef(f.Table)
	if err != nil {
		return "", err
	}
	c, err := m.Conn(ctx, t.Server)
	if err != nil {
		return "", err
	}
	if err := c.DropTable(ctx, "xkeeper-recover-"+f.Move, t.Database, t.Table); err != nil {
		return "", fmt.Errorf("drop %s: %w", t, err)
	}
	return "dropped", nil
}

// protect gives security.auth's ACL to the znodes of f's shard that have
// another one.
func protect(ctx context.Context, m *movepart.Mover, f Finding) (string, error) {
	n, err := m.Store().Protect(ctx, f.Shard)
	return fmt.Sprintf("set security.auth's ACL on %d znodes", n), err
}
