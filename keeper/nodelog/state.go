package nodelog

import "os"

// loc is where a live entry's record lies in the log's segment files.
type loc struct {
	seg *segment
	off int64
	n   int
}

// segment is one segment file: a header, records, then zeros to its end.
type segment struct {
	seq    uint64
	f      *os.File
	v1     bool                // a version-1 segment: read, never written to
	size   int64               // where the next record goes
	zeroed int64               // the file's length: zeros from size on
	live   int                 // live entries in it
	groups map[string]struct{} // groups with entries or deletions in it
}

// group is one Raft group's log: the places of its live entries, in index
// order.
type group struct {
	name   string
	first  uint64 // the index of locs[0]
	locs   []loc  // a nil seg is a hole, which only a replay may leave, for a while
	opened bool   // a member uses it (Log.Group)
}

func (g *group) empty() bool { return len(g.locs) == 0 }

// last is the group's last index, 0 if it has no entries.
func (g *group) last() uint64 {
	if g.empty() {
		return 0
	}
	return g.first + uint64(len(g.locs)) - 1
}

func (g *group) drop(ls []loc) {
	for _, l := range ls {
		if l.seg != nil {
			l.seg.live--
		}
	}
}

// keepFrom drops the entries before index i.
func (g *group) keepFrom(i uint64) {
	if g.empty() || i <= g.first {
		return
	}
	k := min(i-g.first, uint64(len(g.locs)))
	g.drop(g.locs[:k])
	g.locs = g.locs[k:]
	g.first += k
	if g.empty() {
		g.locs, g.first = nil, 0
	}
}

// keepBefore drops the entries at index i and after.
func (g *group) keepBefore(i uint64) {
	if g.empty() || i > g.last() {
		return
	}
	if i <= g.first {
		i = g.first
	}
	k := i - g.first
	g.drop(g.locs[k:])
	clear(g.locs[k:])
	g.locs = g.locs[:k]
	if g.empty() {
		g.locs, g.first = nil, 0
	}
}

// store places entry i at at, dropping the entries at i and after, and
// leaving holes between the last entry and i.
func (g *group) store(i uint64, at loc) {
	g.keepBefore(i)
	if g.empty() {
		g.first = i
	}
	for g.first+uint64(len(g.locs)) < i {
		g.locs = append(g.locs, loc{})
	}
	g.locs = append(g.locs, at)
	at.seg.live++
}

// deleteRange applies a delete record: min 0 drops the entries up to max
// (a prefix), any other min the entries from min on (a suffix). The writer
// writes raft's DeleteRange in this form (see span.delete), which a replay
// applies the same way whatever entries it has met so far.
func (g *group) deleteRange(min, max uint64) {
	switch {
	case min != 0:
		g.keepBefore(min)
	case max == ^uint64(0):
		g.keepBefore(0)
	default:
		g.keepFrom(max + 1)
	}
}

// keepRange drops the entries outside first to last; all if first is 0.
func (g *group) keepRange(first, last uint64) {
	if first == 0 {
		g.keepBefore(0)
		return
	}
	g.keepFrom(first)
	g.keepBefore(last + 1)
}

// holes says whether a replay left the group an entry it does not have.
func (g *group) holes() bool {
	for _, l := range g.locs {
		if l.seg == nil {
			return true
		}
	}
	return false
}

// groupOf returns the group called name, adding it if new.
func (l *Log) groupOf(name string) *group {
	g, ok := l.groups[name]
	if !ok {
		g = &group{name: name}
		l.groups[name] = g
	}
	return g
}

// apply applies a record read from seg at off (n bytes long) to the
// groups: in a replay, and after the writer's records are on disk.
func (l *Log) apply(r record, seg *segment, off int64, n int) {
	switch r.kind {
	case kindEntry:
		seg.groups[r.group] = struct{}{}
		l.groupOf(r.group).store(r.entry.Index, loc{seg: seg, off: off, n: n})
	case kindDelete:
		seg.groups[r.group] = struct{}{}
		l.groupOf(r.group).deleteRange(r.min, r.max)
	case kindState:
		for _, rr := range r.ranges {
			g, ok := l.groups[rr.group]
			if rr.first == 0 && rr.last == tombstone {
				if ok {
					g.keepBefore(0)
					delete(l.groups, rr.group)
				}
				l.dropped[rr.group] = struct{}{}
			} else if ok {
				g.keepRange(rr.first, rr.last)
			}
		}
	}
}
