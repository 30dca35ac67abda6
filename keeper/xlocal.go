package keeper

import (
	"context"
	"time"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/keeper/replica"
)

// localShard is xshard's view of the member's own shard.
type localShard struct {
	name string
	r    *replica.Replica
}

func (l localShard) Shard() string { return l.name }

func (l localShard) IsLeader() bool { return l.r.IsLeader() }

func (l localShard) Submit(ctx context.Context, op proto.OpCode, req proto.Record) (*proto.XRecord, error) {
	ch := make(chan fsm.Result, 1)
	l.r.Submit(fsm.Request{Member: l.r.ID(), Op: op, Body: proto.Marshal(req)}, func(res fsm.Result) { ch <- res })
	select {
	case res := <-ch:
		if res.Err != proto.ErrOK {
			return nil, res.Err
		}
		return res.Resp.(*proto.XRecord), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l localShard) AwaitUnlocked(ctx context.Context, p *proto.XPrepareRequest, deadline time.Time) {
	l.r.AwaitUnlocked(proto.OpXPrepare, p, deadline, ctx.Done())
}

func (l localShard) Time() (t int64) {
	l.r.View(func(st *fsm.State) { t = st.Time() })
	return t
}

func (l localShard) Now() int64 { return l.r.Now().UnixMilli() }

func (l localShard) Records() (recs []proto.XRecord) {
	l.r.View(func(st *fsm.State) { recs = st.XRecords() })
	return recs
}

func (l localShard) Record(id string) (rec *proto.XRecord) {
	l.r.View(func(st *fsm.State) {
		if r := st.XRecord(id); r != nil {
			c := *r // the state's own changes as it applies
			rec = &c
		}
	})
	return rec
}
