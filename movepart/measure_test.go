package movepart_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/movetest"
)

// TestMeasureMove times partition moves of 1M and 10M rows against the
// bare ClickHouse statements they replace, in one run: on one server
// ATTACH PARTITION ... FROM then DROP PARTITION, across servers INSERT ...
// SELECT FROM remote() then DROP PARTITION. Run it with XKEEPER_BENCH=1.
func TestMeasureMove(t *testing.T) {
	if os.Getenv("XKEEPER_BENCH") == "" {
		t.Skip("a measurement: set XKEEPER_BENCH=1")
	}
	e := movetest.Start(t)
	m := e.Mover(t, nil, nil)
	t.Logf("%-12s %-7s %12s %12s %8s %12s", "rows", "servers", "native", "xkeeper", "ratio", "overhead")
	for i, rows := range []int{1_000_000, 10_000_000} {
		for _, cross := range []bool{false, true} {
			dstServer := "ca:onb"
			if cross {
				dstServer = "cb:m"
			}
			db := fmt.Sprintf("m%d", i)
			// The bare statements.
			src := e.NewTable(t, fmt.Sprintf("ca:%s.native_src_%v", db, cross), false, rows, 1)
			dst := e.NewTable(t, fmt.Sprintf("%s.native_dst_%d_%v", dstServer, i, cross), false, 0, 2)
			began := time.Now()
			if cross {
				dst.Exec(t, fmt.Sprintf("INSERT INTO %s.%s SELECT * FROM remote('%s', %s, %s) WHERE _partition_id = '%s'",
					dst.Ref.Database, dst.Ref.Table, e.A.NativeAddr(), src.Ref.Database, src.Ref.Table, movetest.Partition))
			} else {
				dst.Exec(t, fmt.Sprintf("ALTER TABLE %s.%s ATTACH PARTITION ID '%s' FROM %s.%s",
					dst.Ref.Database, dst.Ref.Table, movetest.Partition, src.Ref.Database, src.Ref.Table))
			}
			src.Exec(t, fmt.Sprintf("ALTER TABLE %s.%s DROP PARTITION ID '%s'", src.Ref.Database, src.Ref.Table, movetest.Partition))
			native := time.Since(began)
			// The same through xkeeper.
			src = e.NewTable(t, fmt.Sprintf("ca:%s.xk_src_%v", db, cross), false, rows, 1)
			dst = e.NewTable(t, fmt.Sprintf("%s.xk_dst_%d_%v", dstServer, i, cross), false, 0, 2)
			s := e.Snapshot(t, src, dst)
			began = time.Now()
			p, err := m.Plan(movetest.Ctx(t), movepart.Request{Kind: movepart.Move, From: src.Ref, To: dst.Ref, Partition: movetest.Partition})
			require.NoError(t, err)
			if _, err := m.Run(movetest.Ctx(t), p); err != nil {
				t.Fatal(err)
			}
			xk := time.Since(began)
			e.CheckDone(t, movepart.Move, s)
			servers := "1"
			if cross {
				servers = "2"
			}
			t.Logf("%-12d %-7s %12v %12v %8.2f %12v", rows, servers, native.Round(time.Millisecond), xk.Round(time.Millisecond),
				float64(xk)/float64(native), (xk - native).Round(time.Millisecond))
		}
	}
}
