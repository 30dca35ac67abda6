package movepart

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/client"
)

// TestStoreFencing checks the keeper side of the workflow without
// ClickHouse: locks refuse a second move, a stale driver's writes fail
// after another process rewrote the record, a finish leaves a lock that
// names another move, and a stray lock is deleted only while it names the
// missing move.
func TestStoreFencing(t *testing.T) {
	c, cfg, ctx := startShards(t, "xkeeper:fencing")
	newStore := func() *Store { return storeWith(t, cfg, AuthOptions(cfg)...) }
	s := newStore()
	rec := func() *Record { return testRecord("p") }
	a := rec()
	if err := s.intent(ctx, a); err != nil {
		t.Fatal(err)
	}
	if a.ctime == 0 || len(a.versions) != 2 {
		t.Fatalf("intent did not read back versions and ctime: %v %d", a.versions, a.ctime)
	}
	b := rec()
	if err := s.intent(ctx, b); !errors.Is(err, ErrBusy) {
		t.Fatalf("second move of the same partition: %v, want ErrBusy", err)
	}

	// A takeover by another store rewrites the record: the first driver's
	// next write fails, and its copy of the record is left as it was.
	stale := *a
	taker, err := newStore().Load(ctx, a.ID, nil)
	require.NoError(t, err)
	taker.Driver = "another process"
	if err := newStore().save(ctx, taker, "takeover"); err != nil {
		t.Fatal(err)
	}
	stale.Step = StepCommitted
	if err := s.save(ctx, &stale, "committed"); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale driver's save: %v, want ErrConflict", err)
	}
	if got, _ := s.Load(ctx, a.ID, nil); got.Step != StepIntent || got.Driver != "another process" {
		t.Fatalf("record after the stale save: step %s driver %q", got.Step, got.Driver)
	}

	// The source lock is replaced by another move's (as if recovered as
	// stray and taken again): the finish deletes the record and its own
	// destination lock and leaves the other move's lock.
	lockA := LocksDir + "/" + LockName(a.Source.TableRef, a.Partition)
	cl, err := client.Connect(ctx, c.Servers("a"), AuthOptions(cfg)...)
	require.NoError(t, err)
	defer cl.Close()
	if err := cl.Delete(ctx, lockA, -1); err != nil {
		t.Fatal(err)
	}
	other := Lock{Move: "someone-else", Table: a.Source.TableRef, Partition: a.Partition}
	if _, err := cl.Create(ctx, lockA, encode(other), 0, s.ACL()); err != nil {
		t.Fatal(err)
	}
	if err := s.finish(ctx, taker, true, time.Now()); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if _, err := s.Load(ctx, a.ID, nil); !errors.Is(err, ErrNoMove) {
		t.Fatalf("record after finish: %v", err)
	}
	locks, err := s.Locks(ctx, "a")
	if err != nil || len(locks) != 1 || locks[LockName(a.Source.TableRef, a.Partition)].Move != "someone-else" {
		t.Fatalf("locks on a after finish: %v %v", locks, err)
	}
	if locks, _ := s.Locks(ctx, "b"); len(locks) != 0 {
		t.Fatalf("locks on b after finish: %v", locks)
	}
	if entries, _ := s.Journal(ctx, "b"); len(entries) != 1 || entries[0].ID != a.ID {
		t.Fatalf("journal on b: %+v", entries)
	}

	// The lock names a move that does not exist: stray, but only for that
	// move's name.
	name := LockName(a.Source.TableRef, a.Partition)
	if deleted, err := s.DeleteStrayLock(ctx, "a", name, a.ID); deleted || err != nil {
		t.Fatalf("deleted a lock naming another move: %v %v", deleted, err)
	}
	if deleted, err := s.DeleteStrayLock(ctx, "a", name, "someone-else"); !deleted || err != nil {
		t.Fatalf("stray lock not deleted: %v %v", deleted, err)
	}
	if moves, err := s.Moves(ctx); err != nil || len(moves) != 0 {
		t.Fatalf("moves left: %v %v", moves, err)
	}
}

// testRecord returns a new move of partition between tables of servers
// x (shard a) and y (shard b), at step intent.
func testRecord(partition string) *Record {
	return &Record{ID: uuid.NewString(), Kind: Move, Partition: partition, Step: StepIntent,
		Source:      Endpoint{TableRef: TableRef{Server: "x", Database: "d", Table: "src"}, Shard: "a"},
		Destination: Endpoint{TableRef: TableRef{Server: "y", Database: "d", Table: "dst"}, Shard: "b"}}
}
