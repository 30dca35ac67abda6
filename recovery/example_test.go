package recovery_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"time"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/recovery"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// A move whose driver stopped right after its commit point is found by
// the audit, with what recovery will do, and finished by Recover; the
// audit is clean afterwards.
func ExampleRecover() {
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
	mover := func(failPoint func(movepart.Point)) (*movepart.Mover, func()) {
		r := xshard.NewRouter(w.Config, quiet, client.WithSessionTimeout(2*time.Second))
		m := movepart.New(w.Config, r, movepart.Options{Log: quiet, FailPoint: failPoint})
		return m, func() { m.Close(); r.Close() }
	}

	// The driver stops for good at the commit point, as a killed process
	// would, and its keeper sessions end.
	crashed, closeCrashed := mover(func(p movepart.Point) {
		if p == movepart.PointCommitted {
			runtime.Goexit()
		}
	})
	plan, err := crashed.Plan(ctx, movepart.Request{Kind: movepart.Move, Partition: "202401",
		From: movepart.TableRef{Server: "ca", Database: "db", Table: "events"},
		To:   movepart.TableRef{Server: "cb", Database: "db", Table: "events"}})
	if err != nil {
		panic(err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		crashed.Run(ctx, plan)
	}()
	<-stopped
	closeCrashed()

	m, closeM := mover(nil)
	defer closeM()
	rep, err := recovery.Audit(ctx, m)
	if err != nil {
		panic(err)
	}
	for _, f := range rep.Open() {
		fmt.Printf("%s: %s\n", f.Kind, f.Action)
	}
	outcomes, after, err := recovery.Recover(ctx, m, recovery.Options{Wait: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	for _, o := range outcomes {
		fmt.Println(o.Result)
	}
	fmt.Println("clean:", after.Clean(), "rows on cb:", w.B.MustQuery(ctx, "SELECT count() FROM db.events"))
	// Output:
	// unfinished-move: finish it (roll forward)
	// finished (rolled forward from step committed)
	// clean: true rows on cb: 1000
}
