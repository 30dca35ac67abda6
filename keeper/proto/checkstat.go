package proto

import "bytes"

// CheckStatRequest is ClickHouse Keeper's checkStat (OpCheckStat, flag
// CHECK_STAT): a check of a node's version, as OpCheck (-1: any), and of
// every field of Stat that is not -1 (a wildcard). Its reply has no body;
// a mismatch is ErrBadVersion, a missing node ErrNoNode. The layout is
// ClickHouse 26.7's ZooKeeperCheckRequest with stat_to_check
// (docs/clickhouse-keeper-layouts.md): path, version, then the 68-byte Stat.
type CheckStatRequest struct {
	Path    string
	Version int32
	Stat    Stat
}

// AnyStat is a Stat every field of which is a wildcard: a checkStat of it
// checks the version alone.
func AnyStat() Stat {
	return Stat{Czxid: -1, Mzxid: -1, Ctime: -1, Mtime: -1, Version: -1, Cversion: -1, Aversion: -1,
		EphemeralOwner: -1, DataLength: -1, NumChildren: -1, Pzxid: -1}
}

// Encode implements Record.
func (r *CheckStatRequest) Encode(e *Encoder) { e.String(r.Path); e.Int32(r.Version); r.Stat.Encode(e) }

// Decode implements Record.
func (r *CheckStatRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Version = d.Int32()
	r.Stat.Decode(d)
}

// Matches reports whether a node of stat n passes the check: its version
// is r.Version unless that is -1, and each field of r.Stat that is not -1
// equals n's.
func (r *CheckStatRequest) Matches(n *Stat) bool {
	w := &r.Stat
	eq64 := func(want, have int64) bool { return want == -1 || want == have }
	eq32 := func(want, have int32) bool { return want == -1 || want == have }
	return eq32(r.Version, n.Version) &&
		eq64(w.Czxid, n.Czxid) && eq64(w.Mzxid, n.Mzxid) && eq64(w.Ctime, n.Ctime) && eq64(w.Mtime, n.Mtime) &&
		eq32(w.Version, n.Version) && eq32(w.Cversion, n.Cversion) && eq32(w.Aversion, n.Aversion) &&
		eq64(w.EphemeralOwner, n.EphemeralOwner) && eq32(w.DataLength, n.DataLength) &&
		eq32(w.NumChildren, n.NumChildren) && eq64(w.Pzxid, n.Pzxid)
}

// HoldsOp reports whether m holds an op of type op.
func (m *MultiRequest) HoldsOp(op OpCode) bool {
	for _, o := range m.Ops {
		if o.Op == op {
			return true
		}
	}
	return false
}

// checkStatHeader is how a checkStat's op header starts in a multi's
// record: its type, then done (false).
var checkStatHeader = []byte{0, 0, 0x01, 0xf8, 0}

// MultiBodyHoldsCheckStat reports whether body, a multi's record, decodes
// and holds a checkStat; it decodes only a body that may (one holding the
// bytes such an op's header starts with).
func MultiBodyHoldsCheckStat(body []byte) bool {
	if !bytes.Contains(body, checkStatHeader) {
		return false
	}
	var m MultiRequest
	return Unmarshal(body, &m) == nil && m.HoldsOp(OpCheckStat)
}
