package movepart

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/xkeeper/xkeeper/keeper/proto"
)

// trimJournal deletes, on the shards of rec, the journal entries of moves
// begun before audit.journal_max_age, whose findings have aged out (best
// effort: a leftover entry is only checked again). Nothing goes by count:
// an entry the audit still checks is never dropped to make room.
func (m *Mover) trimJournal(ctx context.Context, rec *Record, now time.Time) {
	oldest := journalName(&Record{ctime: now.Add(-m.store.r.Cluster().Audit.MaxAge()).UnixMilli()})
	for _, shard := range rec.Shards() {
		names, err := m.store.Children(ctx, shard, JournalDir)
		if err != nil {
			continue
		}
		slices.Sort(names)
		n := 0
		for n < len(names) && names[n] < oldest {
			n++
		}
		for _, name := range names[:n] {
			var resp proto.Empty
			_ = m.store.r.Do(ctx, shard, proto.OpDelete, &proto.PathVersionRequest{Path: JournalDir + "/" + name, Version: -1}, &resp)
		}
	}
}

// Moves returns every move in flight, read from every shard.
func (s *Store) Moves(ctx context.Context) ([]*Record, error) {
	seen := map[string]bool{}
	var out []*Record
	for _, sh := range s.r.Cluster().Shards {
		ids, err := s.Children(ctx, sh.Name, MovesDir)
		if err != nil {
			return nil, fmt.Errorf("movepart: list moves on shard %s: %w", sh.Name, err)
		}
		for _, id := range ids {
			if seen[id] {
				continue
			}
			seen[id] = true
			rec, err := s.Load(ctx, id, nil)
			if errors.Is(err, ErrNoMove) {
				continue // ended since the listing
			}
			if err != nil && rec == nil {
				return nil, err
			}
			if err != nil {
				rec.problem = err.Error()
			}
			out = append(out, rec)
		}
	}
	slices.SortFunc(out, func(a, b *Record) int { return int(a.ctime - b.ctime) })
	return out, nil
}

// Locks returns the partition locks of shard, by znode name.
func (s *Store) Locks(ctx context.Context, shard string) (map[string]Lock, error) {
	names, err := s.Children(ctx, shard, LocksDir)
	if err != nil {
		return nil, fmt.Errorf("movepart: list locks on shard %s: %w", shard, err)
	}
	out := map[string]Lock{}
	for _, name := range names {
		data, _, found, err := s.Get(ctx, shard, LocksDir+"/"+name)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		var l Lock
		if err := decodeJSON(data, &l); err != nil {
			l.Move = "(unreadable: " + err.Error() + ")"
		}
		out[name] = l
	}
	return out, nil
}

// DeleteStrayLock deletes lock node of shard if it still names move,
// whose record is gone; it reports whether it did.
func (s *Store) DeleteStrayLock(ctx context.Context, shard, node, move string) (bool, error) {
	return s.deleteStray(ctx, shard, LocksDir+"/"+node, move, func(data []byte) string {
		var l Lock
		_ = decodeJSON(data, &l)
		return l.Move
	})
}

// Fences returns the part fences of shard (proto.PartFencePath), by their
// path under proto.PartFencesDir ("TABLE/PREFIX", escaped), with the move
// each names.
func (s *Store) Fences(ctx context.Context, shard string) (map[string]string, error) {
	tables, err := s.Children(ctx, shard, proto.PartFencesDir)
	if err != nil {
		return nil, fmt.Errorf("movepart: list part fences on shard %s: %w", shard, err)
	}
	out := map[string]string{}
	for _, t := range tables {
		prefixes, err := s.Children(ctx, shard, proto.PartFencesDir+"/"+t)
		if err != nil {
			return nil, err
		}
		for _, p := range prefixes {
			data, _, found, err := s.Get(ctx, shard, proto.PartFencesDir+"/"+t+"/"+p)
			if err != nil {
				return nil, err
			}
			if found {
				out[t+"/"+p] = string(data)
			}
		}
	}
	return out, nil
}

// DeleteStrayFence deletes part fence node (as Fences names it) of shard
// if it still names move, whose record is gone; it reports whether it did.
func (s *Store) DeleteStrayFence(ctx context.Context, shard, node, move string) (bool, error) {
	return s.deleteStray(ctx, shard, proto.PartFencesDir+"/"+node, move, func(data []byte) string { return string(data) })
}

// deleteStray deletes path of shard if the move its content names (by
// moveOf) is still move, whose record is gone, conditional on the version
// read; it reports whether it did.
func (s *Store) deleteStray(ctx context.Context, shard, path, move string, moveOf func([]byte) string) (bool, error) {
	if _, err := s.Load(ctx, move, nil); !errors.Is(err, ErrNoMove) {
		return false, err // the move exists (again): what names it is not stray
	}
	data, stat, found, err := s.Get(ctx, shard, path)
	if err != nil || !found || moveOf(data) != move {
		return false, err
	}
	var resp proto.Empty
	err = s.r.Do(ctx, shard, proto.OpDelete, &proto.PathVersionRequest{Path: path, Version: stat.Version}, &resp)
	if errors.Is(err, proto.ErrNoNode) || errors.Is(err, proto.ErrBadVersion) {
		return false, nil
	}
	return err == nil, s.Explain(err)
}

// Journal returns the journal entries of shard, oldest first.
func (s *Store) Journal(ctx context.Context, shard string) ([]JournalEntry, error) {
	names, err := s.Children(ctx, shard, JournalDir)
	if err != nil {
		return nil, fmt.Errorf("movepart: list the journal on shard %s: %w", shard, err)
	}
	slices.Sort(names)
	var out []JournalEntry
	for _, name := range names {
		data, _, found, err := s.Get(ctx, shard, JournalDir+"/"+name)
		if err != nil {
			return nil, err
		}
		var e JournalEntry
		if found && decodeJSON(data, &e) == nil {
			out = append(out, e)
		}
	}
	return out, nil
}
