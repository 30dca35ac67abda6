package movepart

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/xkeeper/xkeeper/clickhouse"
	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/xshard"
)

// Point is a step boundary of the workflow, where Options.FailPoint is
// called (tests kill the process or a server there).
type Point string

// Step boundaries, in the order a move passes them.
const (
	PointIntent              Point = "intent"               // records and locks created
	PointStagingCreated      Point = "staging-created"      // staging table exists
	PointStagingFilled       Point = "staging-filled"       // staging holds the final partition, unverified
	PointStaged              Point = "staged"               // records say staged
	PointCommitted           Point = "committed"            // records say committed: the commit point
	PointDestinationReplaced Point = "destination-replaced" // destination holds the final partition
	PointSourceDropped       Point = "source-dropped"       // source's partition dropped (moves only)
	PointApplied             Point = "applied"              // records say applied
	PointStagingDropped      Point = "staging-dropped"      // staging table dropped
	PointDone                Point = "done"                 // records and locks deleted
	PointRollbackDropped     Point = "rollback-dropped"     // rolling back: staging table dropped
)

// Points lists every step boundary a move passes, then the rollback's.
var Points = []Point{PointIntent, PointStagingCreated, PointStagingFilled, PointStaged, PointCommitted,
	PointDestinationReplaced, PointSourceDropped, PointApplied, PointStagingDropped, PointDone, PointRollbackDropped}

// Options tune a Mover.
type Options struct {
	Log *slog.Logger
	// FailPoint, when set, is called at every step boundary.
	FailPoint func(Point)
	// StatementFault, when set, is called before every try of a statement
	// that changes a table, once the try's ownership check has passed,
	// with what the statement does; an error it returns fails the try as
	// a lost connection would (fault injection for tests).
	StatementFault func(what string) error
	// Progress, when set, is told the rows copied so far of a cross-server
	// copy and the rows to copy.
	Progress func(copied, total uint64)
	// RetryFor bounds how long a failing ClickHouse step is retried
	// (a server restarting, a replica lagging); 2 minutes if zero.
	RetryFor time.Duration
	// Settle bounds how long a plan waits for a replicated table's
	// partition to be held whole by a replica it can read through (a
	// replica fetching the newest parts); 30 seconds if zero.
	Settle time.Duration
}

// Mover runs and resumes moves. It is safe for concurrent use.
type Mover struct {
	cluster *config.Cluster
	store   *Store
	opt     Options
	mu      sync.Mutex
	conns   map[string]*clickhouse.Conn
}

// New returns a mover for the cluster's ClickHouse servers and shards.
func New(c *config.Cluster, r *xshard.Router, opt Options) *Mover {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.RetryFor == 0 {
		opt.RetryFor = 2 * time.Minute
	}
	if opt.Settle == 0 {
		opt.Settle = 30 * time.Second
	}
	return &Mover{cluster: c, store: NewStore(r, opt.Log), opt: opt, conns: map[string]*clickhouse.Conn{}}
}

// Store returns the mover's keeper store.
func (m *Mover) Store() *Store { return m.store }

// Close closes the mover's ClickHouse connections.
func (m *Mover) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.conns {
		c.Close()
	}
	m.conns = map[string]*clickhouse.Conn{}
}

// Conn returns a connection to the ClickHouse server called name.
func (m *Mover) Conn(ctx context.Context, name string) (*clickhouse.Conn, error) {
	m.mu.Lock()
	c := m.conns[name]
	m.mu.Unlock()
	if c != nil {
		return c, nil
	}
	s, err := m.cluster.ClickHouseServer(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnknownServer, err)
	}
	c, err = clickhouse.Connect(ctx, clickhouse.Server{Name: s.Name, Addr: s.Address, User: s.User, Password: s.Password})
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev := m.conns[name]; prev != nil {
		c.Close()
		return prev, nil
	}
	m.conns[name] = c
	return c, nil
}

func (m *Mover) point(p Point) {
	if m.opt.FailPoint != nil {
		m.opt.FailPoint(p)
	}
}

// AbortedError says a move was rolled back before its commit point, and why.
type AbortedError struct {
	Move   string
	Reason error
}

func (e *AbortedError) Error() string {
	return fmt.Sprintf("movepart: move %s rolled back, nothing changed: %v", e.Move, e.Reason)
}

func (e *AbortedError) Unwrap() error { return e.Reason }

// ErrUnknownServer means the cluster file names no such ClickHouse server.
var ErrUnknownServer = errors.New("movepart: unknown ClickHouse server")

// ErrChanged means a table's partition changed while the move ran.
var ErrChanged = errors.New("partition changed during the move")

// Run starts the planned move and drives it to its end. On an error the
// move may be left in flight; the record says where, and Resume (or
// xkeeper recover) finishes it.
func (m *Mover) Run(ctx context.Context, p *Plan) (*Record, error) {
	rec := p.Record
	rec.Step = StepIntent
	rec.Started = time.Now().UTC()
	// Ownership first: a move in flight always has its owner znode, so
	// recovery never takes over a move whose creator is still alive.
	o, err := m.store.own(ctx, &rec)
	if err != nil {
		return nil, err
	}
	defer m.store.release(context.WithoutCancel(ctx), o)
	if err := m.store.intent(ctx, &rec); err != nil {
		return nil, err
	}
	m.point(PointIntent)
	return &rec, m.note(ctx, &rec, m.drive(ctx, &rec, o))
}

// Resume takes over move id, which must not be owned by a live process,
// and ends it: rolled back before its commit point, finished after it.
// It returns the record as found.
func (m *Mover) Resume(ctx context.Context, id string) (*Record, error) {
	rec, err := m.store.Load(ctx, id, nil)
	if err != nil {
		return nil, err
	}
	o, err := m.store.own(ctx, rec)
	if err != nil {
		return rec, err
	}
	defer m.store.release(context.WithoutCancel(ctx), o)
	// Read again as owner: the previous owner may have moved it on.
	if rec, err = m.store.Load(ctx, id, rec.Shards()); err != nil {
		if errors.Is(err, ErrNoMove) {
			return rec, nil // finished by its previous owner meanwhile
		}
		return rec, err
	}
	found := *rec
	// Fence off the previous driver: its conditional writes fail from now on.
	host, _ := os.Hostname()
	rec.Driver = fmt.Sprintf("%s pid %d session 0x%x", host, os.Getpid(), o.session)
	if err := m.store.save(ctx, rec, "takeover"); err != nil {
		return &found, err
	}
	if !rec.Step.Forward() {
		return &found, m.note(ctx, rec, m.rollback(ctx, rec, o))
	}
	return &found, m.note(ctx, rec, m.drive(ctx, rec, o))
}

// fence returns an error unless this process still owns the move and the
// records are as it last wrote them: checked right before every statement
// that changes a table, so a driver that lost the move to another changes
// nothing more (up to the moment between the check and the statement).
func (m *Mover) fence(ctx context.Context, rec *Record, o *ownership) error {
	if err := m.store.check(ctx, o); err != nil {
		return err
	}
	got, err := m.store.Load(ctx, rec.ID, rec.Shards())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	if !maps.Equal(got.versions, rec.versions) {
		return fmt.Errorf("%w: move %s was written by another driver", ErrConflict, rec.ID)
	}
	return nil
}

// note saves err as the record's last error (best effort) and returns it.
func (m *Mover) note(ctx context.Context, rec *Record, err error) error {
	var aborted *AbortedError
	if err == nil || errors.As(err, &aborted) || errors.Is(err, ErrConflict) || errors.Is(err, ErrLostOwnership) {
		return err
	}
	nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// Only the error is written, over the record as it is now: this
	// process's copy of the step may be behind what it saved.
	cur, lerr := m.store.Load(nctx, rec.ID, rec.Shards())
	if lerr == nil && maps.Equal(cur.versions, rec.versions) {
		cur.LastError = err.Error()
		lerr = m.store.save(nctx, cur, "note")
	}
	if lerr != nil {
		m.opt.Log.Warn("movepart: could not save the last error in the record", "move", rec.ID, "err", lerr)
	}
	return err
}

// drive takes rec from its step to the end.
func (m *Mover) drive(ctx context.Context, rec *Record, o *ownership) error {
	for {
		if err := m.store.check(ctx, o); err != nil {
			return err
		}
		var err error
		switch rec.Step {
		case StepIntent:
			if err = m.stage(ctx, rec); err != nil {
				break
			}
			err = m.advance(ctx, rec, StepStaged, PointStaged)
		case StepStaged:
			// The commit point: both tables must still hold what was planned.
			if err = m.unchanged(ctx, rec); err != nil {
				break
			}
			err = m.advance(ctx, rec, StepCommitted, PointCommitted)
		case StepCommitted:
			if err = m.apply(ctx, rec, o); err != nil {
				return err
			}
			err = m.advance(ctx, rec, StepApplied, PointApplied)
		case StepApplied:
			return m.finish(ctx, rec, o)
		default:
			return fmt.Errorf("movepart: move %s has an unknown step %q", rec.ID, rec.Step)
		}
		if errors.Is(err, ErrChanged) {
			if rerr := m.rollback(ctx, rec, o); rerr != nil {
				return fmt.Errorf("%w; rolling back: %w", err, rerr)
			}
			return &AbortedError{Move: rec.ID, Reason: err}
		}
		if err != nil {
			return err
		}
	}
}

func (m *Mover) advance(ctx context.Context, rec *Record, to Step, p Point) error {
	prev := rec.Step
	rec.Step, rec.LastError = to, ""
	if err := m.store.save(ctx, rec, string(to)); err != nil {
		rec.Step = prev
		return err
	}
	m.point(p)
	return nil
}

// finish lets the replicas catch up, drops the staging table and deletes
// records and locks, leaving a journal entry.
func (m *Mover) finish(ctx context.Context, rec *Record, o *ownership) error {
	if err := m.syncReplicas(ctx, rec); err != nil {
		return err
	}
	if err := m.dropStaging(ctx, rec, o); err != nil {
		return err
	}
	m.point(PointStagingDropped)
	if err := m.store.finish(ctx, rec, true, time.Now().UTC()); err != nil {
		return err
	}
	m.point(PointDone)
	m.trimJournal(ctx, rec, time.Now())
	return nil
}

// rollback undoes a move before its commit point: neither table was
// touched, so dropping the staging table and the records is all.
func (m *Mover) rollback(ctx context.Context, rec *Record, o *ownership) error {
	if rec.Step.Forward() {
		return fmt.Errorf("movepart: move %s is past its commit point (%s) and cannot be rolled back", rec.ID, rec.Step)
	}
	if err := m.dropStaging(ctx, rec, o); err != nil {
		return err
	}
	m.point(PointRollbackDropped)
	return m.store.finish(ctx, rec, false, time.Now().UTC())
}

func (m *Mover) dropStaging(ctx context.Context, rec *Record, o *ownership) error {
	return m.statement(ctx, rec, o, rec.Destination.Server, "drop the staging table", func(c *clickhouse.Conn) error {
		return c.DropTable(ctx, rec.qid("drop"), rec.Destination.Database, rec.Staging)
	})
}

// statement runs f, a statement that changes a table of move rec, on
// server, retrying as onServer does; every try, the first and each retry,
// is fenced first, so that a driver that lost the move to another never
// sends it again (a retry after a lost answer would otherwise replace or
// drop what the new driver's move left there).
func (m *Mover) statement(ctx context.Context, rec *Record, o *ownership, server, what string, f func(*clickhouse.Conn) error) error {
	return m.onServer(ctx, server, what, func(c *clickhouse.Conn) error {
		if err := m.fence(ctx, rec, o); err != nil {
			return err
		}
		if m.opt.StatementFault != nil {
			if err := m.opt.StatementFault(what); err != nil {
				return err
			}
		}
		return f(c)
	})
}

// qid returns the query id prefix of a phase of the move.
func (r *Record) qid(phase string) string { return "xkeeper-" + r.ID + "-" + phase }

// stage builds the partition's final content in the staging table on the
// destination's server, from scratch, and verifies it.
func (m *Mover) stage(ctx context.Context, rec *Record) error {
	src, dst := rec.Source, rec.Destination
	qid := rec.qid("stage")
	err := m.onServer(ctx, dst.Server, "create the staging table", func(c *clickhouse.Conn) error {
		t, err := c.Table(ctx, dst.Database, dst.Table)
		if err != nil {
			return err
		}
		return c.CreateStagingLike(ctx, qid, dst.Database, rec.Staging, t)
	})
	if err != nil {
		return err
	}
	m.point(PointStagingCreated)
	// Copy and the attach of the destination's rows are retried together:
	// the attach adds rows each time it runs, the copy starts from scratch.
	err = m.onServer(ctx, dst.Server, "fill the staging table", func(c *clickhouse.Conn) error {
		var err error
		if src.Server == dst.Server {
			err = c.ReplacePartitionFrom(ctx, qid, dst.Database, rec.Staging, src.Database, src.Table, rec.Partition)
		} else {
			s, lerr := m.cluster.ClickHouseServer(src.Server)
			if lerr != nil {
				return lerr
			}
			err = c.CopyPartitionRemote(m.progress(ctx, src.Fingerprint.Rows), qid, dst.Database, rec.Staging,
				s.Address, s.User, s.Password, src.Database, src.Table, rec.Partition)
		}
		if err != nil || dst.Fingerprint.Rows == 0 {
			return err
		}
		return c.AttachPartitionFrom(ctx, qid, dst.Database, rec.Staging, dst.Database, dst.Table, rec.Partition)
	})
	if err != nil {
		return m.changed(ctx, rec, err)
	}
	m.point(PointStagingFilled)
	if err := m.verifyStaging(ctx, rec); err != nil {
		return m.changed(ctx, rec, err)
	}
	return m.unchanged(ctx, rec)
}

// verifyStaging checks that the staging table holds the source's and the
// destination's rows. On one server, where staging got their parts by hard
// links, parts of the same rows, sizes and marks as the plan's prove it
// without reading the rows; otherwise (a copy across servers, or a part
// merged meanwhile) the fingerprint of its rows must be their sum.
func (m *Mover) verifyStaging(ctx context.Context, rec *Record) error {
	if rec.Source.Server == rec.Destination.Server {
		parts, err := m.parts(ctx, rec.StagingRef(), rec.Partition)
		if err != nil {
			return err
		}
		if clickhouse.SameShape(parts, append(slices.Clone(rec.Source.Parts), rec.Destination.Parts...)) {
			return nil
		}
	}
	got, err := m.fingerprint(ctx, rec.StagingRef(), rec.Partition)
	if err != nil {
		return err
	}
	if want := rec.Expected(); got != want {
		return fmt.Errorf("%w: staging table %s holds %d rows (hash %x), want %d (hash %x)",
			ErrChanged, rec.StagingRef(), got.Rows, got.Hash, want.Rows, want.Hash)
	}
	return nil
}

// changed turns err into ErrChanged when a table no longer holds what was
// planned (its partition gone, its rows changed): the move then aborts.
func (m *Mover) changed(ctx context.Context, rec *Record, err error) error {
	if errors.Is(err, ErrChanged) {
		return err
	}
	if uerr := m.unchanged(ctx, rec); uerr != nil {
		return fmt.Errorf("%w (%v)", uerr, err)
	}
	return err
}

// unchanged returns an ErrChanged error unless source and destination
// still hold what the plan saw in the partition, on every replica of a
// replicated table.
func (m *Mover) unchanged(ctx context.Context, rec *Record) error {
	for _, e := range []Endpoint{rec.Source, rec.Destination} {
		same, err := m.holdsAll(ctx, e, rec.Partition, e.Fingerprint)
		if err != nil {
			return err
		}
		if !same {
			return fmt.Errorf("%w: partition %s of %s no longer holds the rows it held when the move began", ErrChanged, rec.Partition, e.TableRef)
		}
	}
	return nil
}

// holds reports whether e's partition holds want: cheaply, and whatever
// merges did meanwhile, when its active parts are e.Parts (of content
// want) or merges of them (parts never change; a merge keeps what a
// partition holds, though one of a Replacing or Collapsing table changes
// its rows and fingerprint), else by fingerprint.
func (m *Mover) holds(ctx context.Context, e Endpoint, partition string, want clickhouse.Fingerprint) (bool, error) {
	if e.Fingerprint == want {
		parts, err := m.parts(ctx, e.TableRef, partition)
		if err != nil {
			return false, err
		}
		if slices.Equal(partNames(parts), partNames(e.Parts)) || clickhouse.MergedFrom(parts, e.Parts, e.LegacySyntax) {
			return true, nil
		}
	}
	got, err := m.fingerprint(ctx, e.TableRef, partition)
	return got == want, err
}

func (m *Mover) parts(ctx context.Context, t TableRef, partition string) ([]clickhouse.Part, error) {
	var parts []clickhouse.Part
	err := m.onServer(ctx, t.Server, "list the parts of "+t.String(), func(c *clickhouse.Conn) error {
		var err error
		parts, err = c.Parts(ctx, t.Database, t.Table, partition)
		if errors.Is(err, clickhouse.ErrNoPartition) {
			err = nil
		}
		return err
	})
	return parts, err
}

func partNames(parts []clickhouse.Part) []string {
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.Name
	}
	return names
}

func (m *Mover) fingerprint(ctx context.Context, t TableRef, partition string) (clickhouse.Fingerprint, error) {
	var f clickhouse.Fingerprint
	err := m.onServer(ctx, t.Server, "fingerprint "+t.String(), func(c *clickhouse.Conn) error {
		var err error
		f, err = c.Fingerprint(ctx, t.Database, t.Table, partition)
		return err
	})
	return f, err
}

// apply makes the committed move happen: the destination's partition
// replaced by the staging table's, the source's dropped (finish then lets
// the replicas catch up).
// Each statement is idempotent and is skipped when its effect is there.
// The source is checked before the destination changes: one that took
// rows after the commit point stops the move with both tables as they
// were, not with the moved rows in both.
func (m *Mover) apply(ctx context.Context, rec *Record, o *ownership) error {
	src, dst := rec.Source, rec.Destination
	qid := rec.qid("apply")
	if rec.Kind == Move {
		if _, err := m.applied(ctx, rec, src, clickhouse.Fingerprint{}, "dropping"); err != nil {
			return err
		}
	}
	// Each table is compared with the plan first: on the normal path its
	// parts are the plan's, which costs one read of system.parts.
	before, err := m.applied(ctx, rec, dst, rec.Expected(), "replacing")
	if err != nil {
		return err
	}
	if before {
		err = m.statement(ctx, rec, o, dst.Server, "replace the destination's partition", func(c *clickhouse.Conn) error {
			return c.ReplacePartitionFrom(ctx, qid, dst.Database, dst.Table, dst.Database, rec.Staging, rec.Partition)
		})
		if err != nil {
			return err
		}
	}
	if err := m.noteReplaced(ctx, rec); err != nil {
		return err
	}
	m.point(PointDestinationReplaced)
	if rec.Kind == Move {
		before, err := m.applied(ctx, rec, src, clickhouse.Fingerprint{}, "dropping")
		if err != nil {
			return err
		}
		if before {
			err = m.statement(ctx, rec, o, src.Server, "drop the source's partition", func(c *clickhouse.Conn) error {
				return c.DropPartition(ctx, qid, src.Database, src.Table, rec.Partition)
			})
			if err != nil {
				return err
			}
		}
		m.point(PointSourceDropped)
	}
	return nil
}

// applied tells apply whether its statement on e (REPLACE, DROP) is still
// to run (true) or has run (false, e holds after, its effect); anything
// else is an error: somebody changed e after the commit point, and the
// statement, or the move, would lose their rows.
func (m *Mover) applied(ctx context.Context, rec *Record, e Endpoint, after clickhouse.Fingerprint, doing string) (bool, error) {
	before, err := m.mayRun(ctx, e, rec.Partition, e.Fingerprint)
	if err != nil || before {
		return before, err
	}
	return false, m.expect(ctx, rec, e, after, doing)
}

// noteReplaced records the destination's parts once its partition is
// replaced, for a destination whose merges change rows and that no part
// fence guards (Record.Replaced), unless recorded already.
func (m *Mover) noteReplaced(ctx context.Context, rec *Record) error {
	dst := rec.Destination
	if !dst.MergesChangeRows || dst.fence() != "" || rec.Replaced != nil {
		return nil
	}
	parts, err := m.parts(ctx, dst.TableRef, rec.Partition)
	if err != nil {
		return err
	}
	rec.Replaced = parts
	if err := m.store.save(ctx, rec, "replaced"); err != nil {
		rec.Replaced = nil
		return err
	}
	return nil
}

// syncReplicas lifts the move's part fences, which keep the other replicas
// of a replicated destination from fetching what REPLACE made, and waits
// for the replicas of the changed tables to catch up.
func (m *Mover) syncReplicas(ctx context.Context, rec *Record) error {
	if err := m.store.liftFences(ctx, rec); err != nil {
		return err
	}
	for _, t := range []TableRef{rec.Destination.TableRef, rec.Source.TableRef} {
		if t == rec.Source.TableRef && rec.Kind != Move {
			continue
		}
		err := m.onServer(ctx, t.Server, "wait for the replicas of "+t.String(), func(c *clickhouse.Conn) error {
			return c.SyncReplica(ctx, rec.qid("apply"), t.Database, t.Table)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// mayRun reports whether apply may run its statement (REPLACE, DROP) on
// e's partition: always for a table its part fence guards, since no row
// came into the partition since the intent and the statements are
// idempotent (a merge meanwhile, even one of a Replacing or Collapsing
// table that changes rows, changes nothing a statement keeps); otherwise
// only while e still holds want, the plan's content.
func (m *Mover) mayRun(ctx context.Context, e Endpoint, partition string, want clickhouse.Fingerprint) (bool, error) {
	if e.fence() != "" {
		return true, nil
	}
	return m.holds(ctx, e, partition, want)
}

// expect checks that a statement of apply has had its effect on e's
// partition (a run before a crash made it): e holds want, or for the
// destination, merges of the parts its REPLACE left (Record.Replaced).
// Anything else means somebody changed e after the commit point, and the
// statement would lose their rows.
func (m *Mover) expect(ctx context.Context, rec *Record, e Endpoint, want clickhouse.Fingerprint, doing string) error {
	done := Endpoint{TableRef: e.TableRef, LegacySyntax: e.LegacySyntax}
	if e.TableRef == rec.Destination.TableRef && rec.Replaced != nil {
		done.Parts, done.Fingerprint = rec.Replaced, want
	}
	ok, err := m.holds(ctx, done, rec.Partition, want)
	if err != nil || ok {
		return err
	}
	return fmt.Errorf("movepart: move %s is committed but partition %s of %s changed since the move began; "+
		"%s it would lose rows, so the move is left for an operator", rec.ID, rec.Partition, e.TableRef, doing)
}

// onServer runs f with a connection to server, retrying failures that
// may pass (a connection lost, a server restarting) for up to RetryFor.
// A missing table or partition and incompatible tables are not retried.
func (m *Mover) onServer(ctx context.Context, server, what string, f func(*clickhouse.Conn) error) error {
	deadline := time.Now().Add(m.opt.RetryFor)
	backoff := 50 * time.Millisecond
	for {
		c, err := m.Conn(ctx, server)
		if err == nil {
			if err = f(c); err == nil {
				return nil
			}
		}
		if permanent(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("movepart: %s on %s: %w", what, server, err)
		}
		m.opt.Log.Info("movepart: retrying", "server", server, "step", what, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("movepart: %s on %s: %w (last error: %v)", what, server, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func permanent(err error) bool {
	return errors.Is(err, clickhouse.ErrNoTable) || errors.Is(err, clickhouse.ErrNoPartition) ||
		errors.Is(err, clickhouse.ErrIncompatible) || errors.Is(err, ErrChanged) || errors.Is(err, ErrUnknownServer) ||
		errors.Is(err, ErrConflict) || errors.Is(err, ErrLostOwnership)
}

// progress adds a progress callback for a copy of total rows to ctx.
func (m *Mover) progress(ctx context.Context, total uint64) context.Context {
	if m.opt.Progress == nil {
		return ctx
	}
	var mu sync.Mutex
	var copied uint64
	return ch.Context(ctx, ch.WithProgress(func(p *ch.Progress) {
		mu.Lock()
		copied += p.Rows
		n := copied
		mu.Unlock()
		m.opt.Progress(min(n, total), total)
	}))
}
