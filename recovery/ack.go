package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/movepart"
)

// AcksDir holds the acknowledged findings, one znode per finding id, on
// the cluster file's first shard.
const AcksDir = movepart.Root + "/acks"

// Ack is who acknowledged a finding, when, and why.
type Ack struct {
	ID   string    `json:"id"`
	By   string    `json:"by"`
	At   time.Time `json:"at"`
	Note string    `json:"note,omitempty"`
}

// ErrNotAcknowledgeable refuses to acknowledge a finding that is not about
// a finished move: recover deals with work in flight.
var ErrNotAcknowledgeable = errors.New("recovery: only findings about finished moves (history) can be acknowledged")

// ErrNoFinding says an audit now reports no finding with the id given.
var ErrNoFinding = errors.New("recovery: no such finding")

// ackShard is where the acknowledgements live.
func ackShard(m *movepart.Mover) string { return m.Store().Router().Cluster().Shards[0].Name }

// Acknowledge records that by acknowledged finding id, which a fresh audit
// must report as a history finding; audits then count it as settled.
// Acknowledging it again replaces the record.
func Acknowledge(ctx context.Context, m *movepart.Mover, id, by, note string) (*Ack, error) {
	rep, err := Audit(ctx, m)
	if err != nil {
		return nil, err
	}
	var found *Finding
	for i := range rep.Findings {
		if rep.Findings[i].ID == id {
			found = &rep.Findings[i]
		}
	}
	switch {
	case found == nil:
		return nil, fmt.Errorf("%w %q (ids: xkeeper audit --all)", ErrNoFinding, id)
	case !found.History:
		return nil, fmt.Errorf("%w: %s is %s", ErrNotAcknowledgeable, id, found.Kind)
	}
	ack := &Ack{ID: id, By: by, At: time.Now().UTC(), Note: note}
	data, err := json.Marshal(ack)
	if err != nil {
		return nil, err
	}
	s, shard := m.Store(), ackShard(m)
	if _, err := s.EnsureDir(ctx, shard, AcksDir); err != nil {
		return nil, err
	}
	path := AcksDir + "/" + url.PathEscape(id)
	var stat proto.StatResponse
	err = s.Router().Do(ctx, shard, proto.OpSetData, &proto.SetDataRequest{Path: path, Data: data, Version: -1}, &stat)
	if errors.Is(err, proto.ErrNoNode) {
		var created proto.PathRequest
		err = s.Router().Do(ctx, shard, proto.OpCreate, s.CreateOp(path, data, 0).Req, &created)
	}
	if err != nil {
		return nil, s.Explain(err)
	}
	return ack, nil
}

// acknowledgements marks the history findings someone acknowledged.
func (a *Auditor) acknowledgements(ctx context.Context) {
	s, shard := a.m.Store(), ackShard(a.m)
	for i := range a.report.Findings {
		f := &a.report.Findings[i]
		if !f.History {
			continue
		}
		data, _, found, err := s.Get(ctx, shard, AcksDir+"/"+url.PathEscape(f.ID))
		if err != nil {
			a.add(Finding{Kind: Unreachable, Shard: shard, Detail: err.Error()})
			return
		}
		var ack Ack
		if found && json.Unmarshal(data, &ack) == nil {
			f.Acknowledged = &ack
		}
	}
}
