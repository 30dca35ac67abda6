package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// Connect to a shard (here an in-process one), write and read a znode,
// and tell a ZooKeeper error by its code.
func ExampleConnect() {
	shards, err := testenv.StartEmbedded(1, 3)
	if err != nil {
		panic(err)
	}
	defer shards.Close()
	ctx := context.Background()

	c, err := client.Connect(ctx, shards.Servers("a"), client.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if _, err := c.Create(ctx, "/app", []byte("v1"), 0, proto.WorldACL(proto.PermAll)); err != nil {
		panic(err)
	}
	data, stat, err := c.Get(ctx, "/app")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s, version %d\n", data, stat.Version)

	_, err = c.Create(ctx, "/app", nil, 0, proto.WorldACL(proto.PermAll))
	fmt.Println(errors.Is(err, proto.ErrNodeExists), err)
	// Output:
	// v1, version 0
	// true zk: node exists (-110)
}
