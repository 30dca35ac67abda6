package replica

import (
	"github.com/hashicorp/raft-wal/types"
)

// truncationSealedFiler works around a raft-wal v0.4.0 bug (hashicorp/raft-wal
// issue 31, fixed upstream after the last release the module proxy serves):
// when raft deletes a suffix of the log (a follower dropping a deposed
// leader's uncommitted entries), raft-wal marks the tail segment sealed in
// its meta store without writing the segment's index block. The running
// process still reads it through the writer's in-memory index, but after a
// restart raft-wal opens it as a sealed segment, finds no index, and raft
// panics ("sealed segment has no index block"): the member never starts
// again.
//
// This filer opens such a segment the way raft-wal recovers a tail: it
// reads the segment's frames through and indexes the committed entries in
// memory. Nothing is written to the file; entries after the segment's
// MaxIndex (the deleted suffix, still in the file) are not served.
// TestSIGKILLDuringWriteStorm found it; TestTruncatedTailSurvivesRestart
// covers it.
type truncationSealedFiler struct{ types.SegmentFiler }

// Open opens a sealed segment, reading an index-less one's frames through.
func (f truncationSealedFiler) Open(info types.SegmentInfo) (types.SegmentReader, error) {
	if info.IndexStart != 0 {
		return f.SegmentFiler.Open(info)
	}
	w, err := f.SegmentFiler.RecoverTail(info)
	if err != nil {
		return nil, err
	}
	return boundedSegment{SegmentReader: w, info: info}, nil
}

// boundedSegment serves only the entries between the segment's MinIndex
// and MaxIndex.
type boundedSegment struct {
	types.SegmentReader
	info types.SegmentInfo
}

func (s boundedSegment) GetLog(idx uint64) (*types.PooledBuffer, error) {
	if idx < s.info.MinIndex || (s.info.MaxIndex > 0 && idx > s.info.MaxIndex) {
		return nil, types.ErrNotFound
	}
	return s.SegmentReader.GetLog(idx)
}
