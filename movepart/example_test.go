package movepart_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/xkeeper/xkeeper/clickhouse"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// Move a partition from a table on server ca, whose metadata lives on
// keeper shard a, to a table on server cb, on shard b; then attach it back
// to ca (a copy: cb keeps it). Every step is recorded on both shards by
// cross-shard transactions, so a crash anywhere is finished or rolled back
// by recovery. Refusals are sentinel errors.
func ExampleMover_Run() {
	w, err := testenv.StartEmbeddedWorkflow()
	if err != nil {
		panic(err)
	}
	defer w.Close()
	ctx := context.Background()
	if err := w.CreateEvents(ctx, 1000); err != nil { // db.events on ca and cb, 1000 rows in 202401 on ca
		panic(err)
	}

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := xshard.NewRouter(w.Config, quiet)
	defer r.Close()
	m := movepart.New(w.Config, r, movepart.Options{Log: quiet})
	defer m.Close()
	ca := movepart.TableRef{Server: "ca", Database: "db", Table: "events"}
	cb := movepart.TableRef{Server: "cb", Database: "db", Table: "events"}
	rows := func() string {
		return w.A.MustQuery(ctx, "SELECT count() FROM db.events") + " on ca, " + w.B.MustQuery(ctx, "SELECT count() FROM db.events") + " on cb"
	}

	for _, req := range []movepart.Request{
		{Kind: movepart.Move, From: ca, To: cb, Partition: "202401"},
		{Kind: movepart.Attach, From: cb, To: ca, Partition: "202401"},
	} {
		plan, err := m.Plan(ctx, req)
		if err != nil {
			panic(err)
		}
		rec, err := m.Run(ctx, plan)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s %s → %s: %s; rows %s\n", rec.Kind, req.From, req.To, rec.Step, rows())
	}

	_, err = m.Plan(ctx, movepart.Request{Kind: movepart.Move, From: ca, To: cb, Partition: "202402"})
	fmt.Println(errors.Is(err, movepart.ErrRefused), errors.Is(err, clickhouse.ErrNoPartition))
	// Output:
	// move ca:db.events → cb:db.events: applied; rows 0 on ca, 1000 on cb
	// attach cb:db.events → ca:db.events: applied; rows 1000 on ca, 1000 on cb
	// true true
}
