package xshard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// Run a transaction over two shards: every op on every shard applies, or
// none does. A refusal names the shard, the op and the ZooKeeper code.
func ExampleCrossShardTransaction() {
	shards, err := testenv.StartEmbedded(2, 1)
	if err != nil {
		panic(err)
	}
	defer shards.Close()
	ctx := context.Background()
	r := xshard.NewRouter(shards.Config, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer r.Close()

	create := func(path, data string) proto.MultiOp {
		return proto.MultiOp{Op: proto.OpCreate, Req: &proto.CreateRequest{Path: path, Data: []byte(data), ACL: proto.WorldACL(proto.PermAll)}}
	}
	tx := []xshard.MultiRequestForShard{
		{Shard: "a", Requests: []proto.MultiOp{create("/from", "100")}},
		{Shard: "b", Requests: []proto.MultiOp{create("/to", "0"), create("/log-", "moved")}},
	}
	res, err := xshard.CrossShardTransaction(ctx, r, tx)
	if err != nil {
		panic(err)
	}
	for _, sr := range res {
		fmt.Println(sr.Shard, len(sr.Results), "results")
	}

	// The same again: /from exists, so nothing applies anywhere.
	_, err = xshard.CrossShardTransaction(ctx, r, tx)
	var xe *xshard.Error
	if errors.As(err, &xe) {
		fmt.Printf("refused by shard %s, op %d: %v\n", xe.Shard, xe.Op, xe.Code)
	}
	fmt.Println(errors.Is(err, proto.ErrNodeExists))
	// Output:
	// a 1 results
	// b 2 results
	// refused by shard a, op 0: zk: node exists (-110)
	// true
}
