package movepart

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/google/uuid"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/xshard"
)

// ErrNoMove means no shard holds a record of the move.
var ErrNoMove = errors.New("movepart: no such move")

// ErrConflict means a record changed underneath its driver: another
// process advanced, finished or rolled back the move.
var ErrConflict = errors.New("movepart: the move record changed underneath")

// Store reads and writes the workflow's znodes on every shard.
type Store struct {
	r    *xshard.Router
	log  *slog.Logger
	auth string      // security.auth of the router's cluster
	acl  []proto.ACL // of every znode it creates: ACL(cluster)
}

// NewStore returns a store over the router's shards. The znodes it creates
// get ACL(r.Cluster()): with security.auth set, the router must
// authenticate as it (xshard.NewRouter(c, log, AuthOptions(c)...)), or
// every access fails at once with ErrNoAuth.
func NewStore(r *xshard.Router, log *slog.Logger) *Store {
	if log == nil {
		log = slog.Default()
	}
	return &Store{r: r, log: log, auth: r.Cluster().Security.Auth, acl: ACL(r.Cluster())}
}

// Logger returns the store's logger.
func (s *Store) Logger() *slog.Logger { return s.log }

// Router returns the router the store uses.
func (s *Store) Router() *xshard.Router { return s.r }

// Get reads a znode, waiting out cross-shard transaction locks; found is
// false when it does not exist.
func (s *Store) Get(ctx context.Context, shard, path string) (data []byte, stat proto.Stat, found bool, err error) {
	var resp proto.GetDataResponse
	err = s.do(ctx, shard, proto.OpGetData, &proto.PathWatchRequest{Path: path}, &resp)
	if errors.Is(err, proto.ErrNoNode) {
		return nil, proto.Stat{}, false, nil
	}
	return resp.Data, resp.Stat, err == nil, err
}

// do sends an idempotent request (a read, or a write conditional on a
// version), waiting out the locks of cross-shard transactions (a shard in
// reject mode refuses requests on a path a pending transaction writes; the
// lock lasts until the transaction is decided, moments).
func (s *Store) do(ctx context.Context, shard string, op proto.OpCode, req, resp proto.Record) error {
	backoff := 5 * time.Millisecond
	for {
		err := s.r.Do(ctx, shard, op, req, resp)
		if !errors.Is(err, proto.ErrLocked) {
			return s.Explain(err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waiting for a cross-shard transaction's lock: %w)", err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// Children lists a directory's children on shard; none if it does not exist.
func (s *Store) Children(ctx context.Context, shard, dir string) ([]string, error) {
	var resp proto.ChildrenResponse
	err := s.do(ctx, shard, proto.OpGetChildren, &proto.PathWatchRequest{Path: dir}, &resp)
	if errors.Is(err, proto.ErrNoNode) {
		return nil, nil
	}
	return resp.Children, err
}

// liftFences deletes rec's part fences that still name it (after the
// statements of its apply ran: nothing is left for them to guard).
func (s *Store) liftFences(ctx context.Context, rec *Record) error {
	for _, e := range []Endpoint{rec.Source, rec.Destination} {
		del, err := s.ownFence(ctx, e, rec)
		if err != nil {
			return err
		}
		if del == nil {
			continue
		}
		err = s.do(ctx, e.Shard, proto.OpDelete, &proto.PathVersionRequest{Path: del.Path, Version: del.Version}, &proto.Empty{})
		if err != nil && !errors.Is(err, proto.ErrNoNode) {
			return fmt.Errorf("movepart: move %s: lift the part fence %s on shard %s: %w", rec.ID, del.Path, e.Shard, err)
		}
	}
	return nil
}

// ownFence returns the delete of e's part fence, conditional on the
// version read, if the fence exists and names move rec; nil if not.
func (s *Store) ownFence(ctx context.Context, e Endpoint, rec *Record) (*proto.PathVersionRequest, error) {
	f := e.fence()
	if f == "" {
		return nil, nil
	}
	data, stat, found, err := s.Get(ctx, e.Shard, f)
	if err != nil || !found || string(data) != rec.ID {
		return nil, err
	}
	return &proto.PathVersionRequest{Path: f, Version: stat.Version}, nil
}

// ensureFenceDir creates the directory of e's part fences if missing.
func (s *Store) ensureFenceDir(ctx context.Context, e Endpoint) error {
	for _, dir := range []string{proto.PartFencesDir, proto.PartFenceTable(e.ZooKeeperPath)} {
		if _, err := s.EnsureDir(ctx, e.Shard, dir); err != nil {
			return err
		}
	}
	return nil
}

// ensureDirs creates the workflow's directories on shard if missing.
func (s *Store) ensureDirs(ctx context.Context, shard string) error {
	for _, dir := range []string{Root, MovesDir, LocksDir, OwnersDir, JournalDir} {
		// A lock means a transaction writes under dir: it exists.
		if _, err := s.EnsureDir(ctx, shard, dir); err != nil {
			return err
		}
	}
	return nil
}

// Load reads move id's record from shards (its record's shards, or every
// shard when nil). ErrNoMove when none holds it; an error when only some do.
func (s *Store) Load(ctx context.Context, id string, shards []string) (*Record, error) {
	if shards == nil {
		for _, sh := range s.r.Cluster().Shards {
			shards = append(shards, sh.Name)
		}
	}
	var rec *Record
	var with, without []string
	versions := map[string]int32{}
	path, _ := paths(id)
	for _, shard := range shards {
		data, stat, found, err := s.Get(ctx, shard, path)
		if err != nil {
			return nil, fmt.Errorf("movepart: read move %s on shard %s: %w", id, shard, err)
		}
		if !found {
			without = append(without, shard)
			continue
		}
		with = append(with, shard)
		versions[shard] = stat.Version
		if rec == nil {
			if rec, err = decodeRecord(data); err != nil {
				return nil, fmt.Errorf("%w (shard %s, %s)", err, shard, path)
			}
			rec.ctime = stat.Ctime
		}
	}
	if rec == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoMove, id)
	}
	rec.versions = versions
	if len(with) < len(rec.Shards()) {
		return rec, fmt.Errorf("movepart: move %s has a record on shards %v but not on %v", id, with, without)
	}
	return rec, nil
}

// intent creates the records and the partition locks of rec, on one or
// two shards, in one transaction. A lock that exists already fails it
// with an error naming the move that holds the lock.
func (s *Store) intent(ctx context.Context, rec *Record) error {
	for _, shard := range rec.Shards() {
		if err := s.ensureDirs(ctx, shard); err != nil {
			return err
		}
	}
	path, _ := paths(rec.ID)
	data := encode(rec)
	ops := map[string][]client.Op{}
	for _, shard := range rec.Shards() {
		ops[shard] = append(ops[shard], s.CreateOp(path, data, 0))
	}
	for _, e := range []Endpoint{rec.Source, rec.Destination} {
		lock := Lock{Move: rec.ID, Table: e.TableRef, Partition: rec.Partition}
		ops[e.Shard] = append(ops[e.Shard], s.CreateOp(LocksDir+"/"+e.lockName(rec.Partition), encode(lock), 0))
		if f := e.fence(); f != "" {
			if err := s.ensureFenceDir(ctx, e); err != nil {
				return err
			}
			ops[e.Shard] = append(ops[e.Shard], s.CreateOp(f, []byte(rec.ID), 0))
		}
	}
	err := s.transact(ctx, rec, "intent", ops, func(ctx context.Context) (bool, error) {
		_, err := s.Load(ctx, rec.ID, rec.Shards())
		return err == nil, nil
	})
	var xe *xshard.Error
	if errors.As(err, &xe) && xe.Code == proto.ErrNodeExists {
		return s.lockedBy(ctx, rec)
	}
	if err != nil {
		return err
	}
	// The records' versions and creation time, for the later steps.
	got, err := s.Load(ctx, rec.ID, rec.Shards())
	if err != nil {
		return err
	}
	rec.versions, rec.ctime = got.versions, got.ctime
	return nil
}

// lockedBy explains a failed intent: which move holds which lock.
func (s *Store) lockedBy(ctx context.Context, rec *Record) error {
	for _, e := range []Endpoint{rec.Source, rec.Destination} {
		data, _, found, err := s.Get(ctx, e.Shard, LocksDir+"/"+e.lockName(rec.Partition))
		if err != nil || !found {
			continue
		}
		holder := string(data)
		var l Lock
		if decodeJSON(data, &l) == nil {
			holder = l.Move
		}
		return fmt.Errorf("%w: partition %s of %s is being moved by move %s", ErrBusy, rec.Partition, e.TableRef, holder)
	}
	return fmt.Errorf("%w: partition %s of %s or %s", ErrBusy, rec.Partition, rec.Source.TableRef, rec.Destination.TableRef)
}

// ErrBusy means the partition is locked by another move.
var ErrBusy = errors.New("movepart: partition already being moved")

// save writes rec (its step and last error) to every shard, conditional on
// the versions last seen.
func (s *Store) save(ctx context.Context, rec *Record, why string) error {
	path, _ := paths(rec.ID)
	data := encode(rec)
	ops := map[string][]client.Op{}
	for _, shard := range rec.Shards() {
		ops[shard] = []client.Op{client.SetOp(path, data, rec.versions[shard])}
	}
	settled := false
	err := s.transact(ctx, rec, why, ops, func(ctx context.Context) (bool, error) {
		got, err := s.Load(ctx, rec.ID, rec.Shards())
		if errors.Is(err, ErrNoMove) {
			return false, nil // gone: another driver ended the move
		}
		if err != nil {
			return false, err
		}
		if string(encode(got)) != string(data) {
			return false, nil
		}
		rec.versions, settled = got.versions, true
		return true, nil
	})
	if err == nil && !settled {
		// Applied as sent: each setData added one to its znode's version.
		versions := maps.Clone(rec.versions)
		for _, shard := range rec.Shards() {
			versions[shard]++
		}
		rec.versions = versions
	}
	return err
}

// finish deletes rec's records and locks on every shard; journal adds an
// entry for the finished move on each.
func (s *Store) finish(ctx context.Context, rec *Record, journal bool, now time.Time) error {
	path, _ := paths(rec.ID)
	for attempt := 0; ; attempt++ {
		ops := map[string][]client.Op{}
		for _, shard := range rec.Shards() {
			ops[shard] = []client.Op{client.DeleteOp(path, rec.versions[shard])}
			if journal {
				entry := JournalEntry{Record: *rec, Finished: now}
				entry.LastError = ""
				ops[shard] = append(ops[shard], s.CreateOp(JournalDir+"/"+journalName(rec), encode(entry), 0))
			}
		}
		// Only this move's own locks go: a lock of the same name that names
		// another move (this one's was removed as stray) stays.
		for _, e := range []Endpoint{rec.Source, rec.Destination} {
			lock := LocksDir + "/" + e.lockName(rec.Partition)
			data, stat, found, err := s.Get(ctx, e.Shard, lock)
			if err != nil {
				return err
			}
			var l Lock
			if found && decodeJSON(data, &l) == nil && l.Move == rec.ID {
				ops[e.Shard] = append(ops[e.Shard], client.DeleteOp(lock, stat.Version))
			}
			del, err := s.ownFence(ctx, e, rec)
			if err != nil {
				return err
			}
			if del != nil {
				ops[e.Shard] = append(ops[e.Shard], client.DeleteOp(del.Path, del.Version))
			}
		}
		err := s.transact(ctx, rec, "finish", ops, func(ctx context.Context) (bool, error) {
			_, err := s.Load(ctx, rec.ID, rec.Shards())
			if errors.Is(err, ErrNoMove) {
				return true, nil
			}
			return false, err
		})
		if !errors.Is(err, ErrConflict) || attempt == 3 {
			return err
		}
		// A lock changed between its read and the transaction: read again,
		// unless the record itself changed (then another driver has it).
		got, lerr := s.Load(ctx, rec.ID, rec.Shards())
		if lerr != nil || !maps.Equal(got.versions, rec.versions) {
			return err
		}
	}
}

// transact runs ops (by shard) as one cross-shard transaction. Every
// failure is first settled by applied, which reads the shards and says
// whether the change is there (an earlier attempt whose answer was lost may
// have made it). A change refused by a version or existence check is
// ErrConflict (ErrNodeExists is returned as is); one refused for a lock
// held by another transaction, a passed deadline or no answer is tried
// again as a new transaction until ctx ends.
func (s *Store) transact(ctx context.Context, rec *Record, why string, ops map[string][]client.Op, applied func(context.Context) (bool, error)) error {
	var reqs []xshard.MultiRequestForShard
	for _, shard := range rec.Shards() {
		reqs = append(reqs, xshard.MultiRequestForShard{Shard: shard, Requests: ops[shard]})
	}
	token := uuid.NewString()[:8]
	backoff := 10 * time.Millisecond
	for attempt := 0; ; attempt++ {
		id := fmt.Sprintf("%s.%s.%s.%d", rec.ID, why, token, attempt)
		_, err := xshard.CrossShardTransaction(ctx, s.r, reqs, xshard.Options{ID: id})
		if err == nil {
			return nil
		}
		if errors.Is(err, proto.ErrNoAuth) {
			// Refused before anything changed (a transaction applies on
			// every shard or none), and refused again if retried.
			return fmt.Errorf("movepart: move %s, %s: %w", rec.ID, why, s.Explain(err))
		}
		ok, cerr := applied(ctx)
		if ok {
			return nil
		}
		var xe *xshard.Error
		if errors.As(err, &xe) && cerr == nil {
			switch xe.Code {
			case proto.ErrNodeExists:
				return err // the caller explains it
			case proto.ErrBadVersion, proto.ErrNoNode:
				return fmt.Errorf("%w: move %s, %s: %v", ErrConflict, rec.ID, why, err)
			}
		}
		// Locked by another transaction, past its deadline, no answer:
		// try again as a new transaction.
		s.log.Debug("movepart: retrying a transaction", "move", rec.ID, "step", why, "err", err, "check", cerr)
		select {
		case <-ctx.Done():
			return fmt.Errorf("movepart: move %s, %s: %w (last error: %v)", rec.ID, why, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}
