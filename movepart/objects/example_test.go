package objects_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/objects"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// Link a part file of a table on one keeper shard to the S3 object a table
// on another shard refers to: one transaction adds the reference on the
// second shard and counts it on the object's home shard (the one its key
// hashes to), across shards when they differ. The object is deleted by GC
// only once no reference is left.
func ExampleCatalog_Link() {
	shards, err := testenv.StartEmbedded(2, 1)
	if err != nil {
		panic(err)
	}
	defer shards.Close()
	s3, err := testenv.StartMemS3("parts")
	if err != nil {
		panic(err)
	}
	defer s3.Close()
	c := *shards.Config
	c.S3 = s3.Config
	// Servers ca and cb keep their tables' metadata on shards a and b; the
	// catalog does not connect to them.
	c.ClickHouse.Servers = []config.ClickHouseServer{{Name: "ca", Address: "127.0.0.1:9000"}, {Name: "cb", Address: "127.0.0.1:9001"}}
	c.Tables = []config.Table{{Server: "ca", Shard: "a"}, {Server: "cb", Shard: "b"}}

	ctx := context.Background()
	bucket, err := objects.OpenS3(ctx, c.S3)
	if err != nil {
		panic(err)
	}
	const key = "parts/7f3a/data.bin" // uploaded as ClickHouse's S3 disk would
	if _, err := bucket.Client().PutObject(ctx, c.S3.Bucket, key, strings.NewReader("column data"), 11, minio.PutObjectOptions{}); err != nil {
		panic(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := xshard.NewRouter(&c, quiet)
	defer r.Close()
	cat := objects.New(r, bucket, quiet)

	events := objects.Ref{Table: movepart.TableRef{Server: "ca", Database: "db", Table: "events"}, Part: "202401_1_1_0", File: "data.bin"}
	archive := objects.Ref{Table: movepart.TableRef{Server: "cb", Database: "db", Table: "archive"}, Part: "202401_9_9_0", File: "data.bin"}
	if err := cat.Register(ctx, events, key); err != nil {
		panic(err)
	}
	if err := cat.Link(ctx, events, archive); err != nil {
		panic(err)
	}
	homed, err := cat.Objects(ctx)
	if err != nil {
		panic(err)
	}
	for _, o := range homed {
		fmt.Printf("%s: %d references, %s, home shard %s\n", o.Key, o.Refs, o.State, o.Home)
	}

	// A link is idempotent (a retry succeeds); errors are sentinels.
	fmt.Println(cat.Link(ctx, events, archive))
	missing := objects.Ref{Table: events.Table, Part: "202401_2_2_0", File: "data.bin"}
	fmt.Println(errors.Is(cat.Link(ctx, missing, archive), objects.ErrNoReference))
	// Output:
	// parts/7f3a/data.bin: 2 references, live, home shard b
	// <nil>
	// true
}
