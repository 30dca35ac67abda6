package nodelog

import (
	"fmt"
	"math"

	"github.com/hashicorp/raft"
)

// Store is one group's log: a raft.LogStore.
type Store struct {
	l *Log
	g *group
}

var (
	_ raft.LogStore          = (*Store)(nil)
	_ raft.MonotonicLogStore = (*Store)(nil)
)

// IsMonotonic says that the group's entries have no gaps: raft empties
// the log when it installs a snapshot rather than leave one.
func (s *Store) IsMonotonic() bool { return true }

// FirstIndex returns the group's first index, 0 if it has no entries.
func (s *Store) FirstIndex() (uint64, error) {
	s.l.mu.RLock()
	defer s.l.mu.RUnlock()
	return s.g.first, nil
}

// LastIndex returns the group's last index, 0 if it has no entries.
func (s *Store) LastIndex() (uint64, error) {
	s.l.mu.RLock()
	defer s.l.mu.RUnlock()
	return s.g.last(), nil
}

// GetLog reads the group's entry at index into out.
func (s *Store) GetLog(index uint64, out *raft.Log) error {
	s.l.mu.RLock()
	if s.g.empty() || index < s.g.first || index > s.g.last() {
		s.l.mu.RUnlock()
		return raft.ErrLogNotFound
	}
	at := s.g.locs[index-s.g.first]
	buf := make([]byte, at.n)
	_, err := at.seg.f.ReadAt(buf, at.off)
	s.l.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("nodelog: group %s: read entry %d: %w", s.g.name, index, err)
	}
	body, _, ok := nextRecord(buf)
	if !ok {
		return fmt.Errorf("nodelog: group %s: entry %d: %w (checksum)", s.g.name, index, errCorrupt)
	}
	r, err := decode(body)
	if err == nil && (r.kind != kindEntry || r.group != s.g.name || r.entry.Index != index) {
		err = fmt.Errorf("%w: found %q entry %d", errCorrupt, r.group, r.entry.Index)
	}
	if err != nil {
		return fmt.Errorf("nodelog: group %s: entry %d: %w", s.g.name, index, err)
	}
	*out = r.entry
	return nil
}

// StoreLog stores one entry.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores entries of consecutive indexes, the first at most one
// past the group's last; it replaces the entries at and after that index.
// They are on disk (with Options.Fsync) when it returns.
func (s *Store) StoreLogs(logs []*raft.Log) error { return s.l.do(&request{g: s.g, logs: logs}) }

// DeleteRange deletes the entries from min to max, a prefix or a suffix of
// the group's log.
func (s *Store) DeleteRange(min, max uint64) error {
	return s.l.do(&request{g: s.g, delete: true, min: min, max: max})
}

// span is a group's first and last index as a batch's earlier requests
// leave them, (0, 0) when it has no entries: the writer checks requests
// against it before it writes them.
type span struct{ first, last uint64 }

// store checks entries to store against the span (in sequence, no gap)
// and against the longest record a replay reads (maxRecord), then moves
// the span past them.
func (sp *span) store(name string, logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	i := logs[0].Index
	for k, e := range logs {
		if e.Index != i+uint64(k) {
			return fmt.Errorf("nodelog: group %s: entries out of sequence (%d after %d)", name, e.Index, logs[k-1].Index)
		}
		if n := entryLen(name, e); n > int(maxRecord) {
			return fmt.Errorf("nodelog: group %s: entry %d: a record of %d bytes, above the %d a replay reads", name, e.Index, n, maxRecord)
		}
	}
	switch {
	case i == 0:
		return fmt.Errorf("nodelog: group %s: an entry with index 0", name)
	case sp.last != 0 && i > sp.last+1:
		return fmt.Errorf("nodelog: group %s: entry %d leaves a gap after %d", name, i, sp.last)
	case sp.last == 0 || i < sp.first:
		sp.first = i
	}
	sp.last = i + uint64(len(logs)) - 1
	return nil
}

// delete checks a DeleteRange and returns its record's form (see
// group.deleteRange), or write false when it deletes nothing.
func (sp *span) delete(name string, min, max uint64) (rmin, rmax uint64, write bool, err error) {
	switch {
	case sp.last == 0 || max < min || max < sp.first || min > sp.last:
		return 0, 0, false, nil
	case min <= sp.first && max >= sp.last:
		*sp = span{}
		return 0, math.MaxUint64, true, nil
	case min <= sp.first:
		sp.first = max + 1
		return 0, max, true, nil
	case max >= sp.last:
		sp.last = min - 1
		return min, math.MaxUint64, true, nil
	}
	return 0, 0, false, fmt.Errorf("nodelog: group %s: DeleteRange(%d, %d) of entries %d to %d is neither a prefix nor a suffix",
		name, min, max, sp.first, sp.last)
}

// Close releases the group for another Log.Group; its entries stay.
func (s *Store) Close() error {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	s.g.opened = false
	return nil
}
