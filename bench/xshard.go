package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/xshard"
)

// XOptions describe a cross-shard run: each client runs transactions of
// Ops setData ops spread over Span shards (Span 1 is a plain multi on one
// shard, the baseline), or, with probability 1-Fraction, a one-shard multi.
type XOptions struct {
	Cluster  *config.Cluster
	Clients  int
	Duration time.Duration
	Warmup   time.Duration
	Span     int     // shards per transaction
	Fraction float64 // share of transactions that span shards (default 1)
	Ops      int     // setData ops per transaction, spread over the shards
	Keys     int     // keys per shard
	// Concurrent runs each transaction's ops as Span one-shard multis at
	// once instead (op "multi×N"): the floor a one-round transaction can
	// reach where its shards share the machines, every shard's log
	// committing at the same moment.
	Concurrent bool
	Prefix     string
	Logger     *slog.Logger // the routers' log; slog.Default() if nil
	Started    func()       // if set, called once the keys exist, before the first transaction
}

// RunX measures cross-shard transactions; the result's Op is "xtx-N" or
// "multi" (Span 1).
func RunX(ctx context.Context, o XOptions) (Result, error) {
	if o.Clients <= 0 {
		o.Clients = 1
	}
	if o.Span <= 0 {
		o.Span = 2
	}
	if o.Span > len(o.Cluster.Shards) {
		return Result{}, fmt.Errorf("bench: span %d over %d shards", o.Span, len(o.Cluster.Shards))
	}
	if o.Fraction <= 0 {
		o.Fraction = 1
	}
	if o.Ops < o.Span {
		o.Ops = o.Span
	}
	if o.Keys <= 0 {
		o.Keys = 1000
	}
	if o.Prefix == "" {
		o.Prefix = "/xkeeper-xbench"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	root := fmt.Sprintf("%s-%d", o.Prefix, time.Now().UnixNano())
	setup := xshard.NewRouter(o.Cluster, o.Logger)
	defer setup.Close()
	for _, sh := range o.Cluster.Shards {
		c, err := setup.Client(ctx, sh.Name)
		if err != nil {
			return Result{}, err
		}
		if _, err := c.Do(ctx, proto.OpCreate, &proto.CreateRequest{Path: root, ACL: proto.WorldACL(proto.PermAll)}, nil); err != nil {
			return Result{}, err
		}
		err = parallel(o.Keys, 64, func(k int) error {
			_, err := c.Do(ctx, proto.OpCreate, &proto.CreateRequest{Path: fmt.Sprintf("%s/k%d", root, k), Data: []byte("0"),
				ACL: proto.WorldACL(proto.PermAll)}, nil)
			return err
		})
		if err != nil {
			return Result{}, err
		}
	}
	if o.Started != nil {
		o.Started()
	}
	begin := time.Now()
	measured, end := begin.Add(o.Warmup), begin.Add(o.Warmup+o.Duration)
	samples, errs, _ := closedLoop(ctx, o.Clients, measured, end, func(i int) (func() error, func()) {
		r := xshard.NewRouter(o.Cluster, o.Logger)
		rng := rand.New(rand.NewPCG(uint64(i), 11))
		return func() error {
			span := 1
			if o.Span > 1 && rng.Float64() < o.Fraction {
				span = o.Span
			}
			reqs := transaction(rng, o, root, span)
			if !o.Concurrent {
				_, err := xshard.CrossShardTransaction(ctx, r, reqs)
				return err
			}
			errs := make([]error, len(reqs))
			var wg sync.WaitGroup
			for i := range reqs {
				wg.Go(func() { _, errs[i] = xshard.CrossShardTransaction(ctx, r, reqs[i:i+1]) })
			}
			wg.Wait()
			return errors.Join(errs...)
		}, r.Close
	})
	name := fmt.Sprintf("xtx-%d", o.Span)
	switch {
	case o.Span == 1:
		name = "multi"
	case o.Concurrent:
		name = fmt.Sprintf("multi×%d", o.Span)
	}
	return summarize(Options{Op: name, Clients: o.Clients}, samples, errs, time.Since(measured)), nil
}

// transaction builds o.Ops unconditional setData ops over span distinct
// random shards.
func transaction(rng *rand.Rand, o XOptions, root string, span int) []xshard.MultiRequestForShard {
	perm := rng.Perm(len(o.Cluster.Shards))[:span]
	reqs := make([]xshard.MultiRequestForShard, span)
	for i, si := range perm {
		reqs[i].Shard = o.Cluster.Shards[si].Name
	}
	for j := 0; j < o.Ops; j++ {
		rq := &reqs[j%span]
		rq.Requests = append(rq.Requests, proto.MultiOp{Op: proto.OpSetData, Req: &proto.SetDataRequest{
			Path: fmt.Sprintf("%s/k%d", root, rng.IntN(o.Keys)), Data: []byte("1"), Version: -1}})
	}
	return reqs
}
