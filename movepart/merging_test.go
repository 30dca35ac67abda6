package movepart_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/movetest"
	"github.com/xkeeper/xkeeper/testenv"
)

// testMergesBetweenSteps moves a partition between plain (not replicated)
// ReplacingMergeTree tables that share keys, with OPTIMIZE ... FINAL on
// source, destination and staging at one step boundary of each trial: a
// merge that changes rows is not a change of content, so every move ends,
// the destination holds what ClickHouse's merge makes of both tables'
// rows, the source nothing, and the audit is clean. The trial at
// PointDestinationReplaced also stops the driver there (a crash after
// the REPLACE and a merge), and another finishes the move.
func testMergesBetweenSteps(t *testing.T, e movetest.Env) {
	for i, p := range []movepart.Point{movepart.PointStagingFilled, movepart.PointStaged, movepart.PointCommitted, movepart.PointDestinationReplaced} {
		t.Run(string(p), func(t *testing.T) {
			db := fmt.Sprintf("mrg%d", i)
			src, dst := replacingTable(t, e, "ca", db, "src"), replacingTable(t, e, "cb", db, "dst")
			ref := replacingTable(t, e, "cb", db, "ref") // what a merge of both tables' rows makes
			for _, tb := range []movetest.Table{src, ref} {
				fill(t, tb, 0, 200, 1)
				fill(t, tb, 0, 100, 2)
			}
			for _, tb := range []movetest.Table{dst, ref} {
				fill(t, tb, 150, 100, 3)
				fill(t, tb, 200, 50, 4)
			}
			var staging string
			m := e.Mover(t, nil, func(at movepart.Point) {
				if at != p {
					return
				}
				optimize(t, src)
				optimize(t, dst)
				optimize(t, movetest.Table{Srv: dst.Srv, Ref: movepart.TableRef{Server: "cb", Database: db, Table: staging}})
				if p == movepart.PointDestinationReplaced {
					runtime.Goexit() // the driver dies here
				}
			})
			plan, err := m.Plan(movetest.Ctx(t), movepart.Request{Kind: movepart.Move, From: src.Ref, To: dst.Ref, Partition: movetest.Partition})
			require.NoError(t, err)
			staging = plan.Staging
			err = runToEnd(t, e, m, plan)
			require.NoError(t, err)
			assert.Equal(t, "0", strings.TrimSpace(src.Exec(t, "SELECT count() FROM "+db+".src WHERE _partition_id = '"+movetest.Partition+"'")))
			assert.Equal(t, final(t, ref), final(t, dst), "the destination holds what a merge of both tables' rows makes")
			e.CheckClean(t)
		})
	}
}

// testSourceTakesRowsAfterCommit inserts into a plain source right after
// the commit point, where nothing fences it: the move stops before it
// changes the destination (which would then hold rows the source keeps
// too), the audit shows it, and once an operator takes the late rows out
// of the source a resumed move ends.
func testSourceTakesRowsAfterCommit(t *testing.T, e movetest.Env) {
	src := e.NewTable(t, "ca:late.src", false, 300, 1)
	dst := e.NewTable(t, "cb:late.dst", false, 20, 2)
	s := e.Snapshot(t, src, dst)
	m := e.Mover(t, nil, func(p movepart.Point) {
		if p == movepart.PointCommitted {
			src.Exec(t, "INSERT INTO late.src SELECT toDate('2024-01-03'), 1000000000 + number, 'late', NULL FROM numbers(7)")
		}
	})
	plan, err := m.Plan(movetest.Ctx(t), movepart.Request{Kind: movepart.Move, From: src.Ref, To: dst.Ref, Partition: movetest.Partition})
	require.NoError(t, err)
	_, err = m.Run(movetest.Ctx(t), plan)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "left for an operator")
	assert.Equal(t, s.DstFP, e.Fingerprint(t, dst.Ref, movetest.Partition), "the destination changed though the move stopped")
	assert.Equal(t, s.SrcFP.Rows+7, e.Fingerprint(t, src.Ref, movetest.Partition).Rows)
	require.NotEmpty(t, e.Audit(t).Findings, "the audit shows the stopped move")

	src.Exec(t, "ALTER TABLE late.src DELETE WHERE k >= 1000000000")
	require.Eventually(t, func() bool { return e.Fingerprint(t, src.Ref, movetest.Partition) == s.SrcFP }, time.Minute, 50*time.Millisecond)
	_, err = e.Mover(t, nil, nil).Resume(movetest.Ctx(t), plan.ID)
	require.NoError(t, err)
	e.CheckDone(t, movepart.Move, s)
}

// runToEnd runs plan with m; a driver that dies on the way (its hook
// called runtime.Goexit) leaves the move to a new mover, which resumes it.
func runToEnd(t *testing.T, e movetest.Env, m *movepart.Mover, plan *movepart.Plan) error {
	done := make(chan error, 1)
	exited := true
	go func() {
		defer func() {
			if exited {
				done <- errDriverDied
			}
		}()
		_, err := m.Run(movetest.Ctx(t), plan)
		exited = false
		done <- err
	}()
	err := <-done
	if !errors.Is(err, errDriverDied) {
		return err
	}
	// The driver's deferred release ended its ownership as it died.
	_, err = e.Mover(t, nil, nil).Resume(movetest.Ctx(t), plan.ID)
	return err
}

var errDriverDied = errors.New("the driver died")

// replacingTable creates a plain ReplacingMergeTree DB.NAME on server,
// versioned by v.
func replacingTable(t *testing.T, e movetest.Env, server, db, name string) movetest.Table {
	tb := movetest.Table{Srv: e.Server(server), Ref: movepart.TableRef{Server: server, Database: db, Table: name}}
	tb.Exec(t, "CREATE DATABASE IF NOT EXISTS "+db)
	tb.Exec(t, "CREATE TABLE "+db+"."+name+" (d Date, k UInt64, v UInt32) ENGINE = ReplacingMergeTree(v) PARTITION BY toYYYYMM(d) ORDER BY k")
	return tb
}

// fill inserts keys from..from+n-1 into the partition with version v, as
// one part.
func fill(t *testing.T, tb movetest.Table, from, n, v int) {
	tb.Exec(t, fmt.Sprintf("INSERT INTO %s.%s SELECT toDate('2024-01-01') + number %% 28, %d + number, %d FROM numbers(%d)",
		tb.Ref.Database, tb.Ref.Table, from, v, n))
}

func optimize(t *testing.T, tb movetest.Table) {
	tb.Exec(t, "OPTIMIZE TABLE "+tb.Ref.Database+"."+tb.Ref.Table+" PARTITION ID '"+movetest.Partition+"' FINAL")
}

// final returns the rows of the table's partition as its merges leave them.
func final(t *testing.T, tb movetest.Table) string {
	return tb.Exec(t, "SELECT count(), sum(cityHash64(d, k, v)) FROM "+tb.Ref.Database+"."+tb.Ref.Table+
		" FINAL WHERE _partition_id = '"+movetest.Partition+"'")
}

// testNoRetryAfterLostOwnership fails the first try of the source's DROP
// and takes the move away from its driver meanwhile (its owner znode
// deleted, as a session that expired and a new driver would): the driver
// sends no further try, and a new driver finishes the move.
func testNoRetryAfterLostOwnership(t *testing.T, e movetest.Env) {
	src := e.NewTable(t, "ca:own.src", false, 300, 1)
	dst := e.NewTable(t, "cb:own.dst", false, 20, 2)
	s := e.Snapshot(t, src, dst)
	keeper := movetest.Router(t, e.Config)
	var id string
	tries := 0
	r := movetest.Router(t, e.Config, client.WithSessionTimeout(2*time.Second))
	m := movepart.New(e.Config, r, movepart.Options{Log: testenv.TestLogger(t), RetryFor: time.Minute,
		StatementFault: func(what string) error {
			if !strings.HasPrefix(what, "drop the source's") {
				return nil
			}
			if tries++; tries == 1 {
				c, err := keeper.Client(movetest.Ctx(t), "a")
				if err == nil {
					err = c.Delete(movetest.Ctx(t), movepart.OwnersDir+"/"+id, -1)
				}
				if err != nil {
					return fmt.Errorf("the test could not take the move away: %w", err)
				}
				return errors.New("injected: connection lost")
			}
			return nil
		}})
	t.Cleanup(m.Close)
	plan, err := m.Plan(movetest.Ctx(t), movepart.Request{Kind: movepart.Move, From: src.Ref, To: dst.Ref, Partition: movetest.Partition})
	require.NoError(t, err)
	id = plan.ID
	_, err = m.Run(movetest.Ctx(t), plan)
	require.ErrorIs(t, err, movepart.ErrLostOwnership)
	assert.Equal(t, 1, tries, "the DROP was tried again after the driver lost the move")
	assert.Equal(t, s.SrcFP, e.Fingerprint(t, src.Ref, movetest.Partition), "the source was dropped by a driver that had lost the move")

	_, err = e.Mover(t, nil, nil).Resume(movetest.Ctx(t), plan.ID)
	require.NoError(t, err)
	e.CheckDone(t, movepart.Move, s)
}
