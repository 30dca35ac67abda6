package recovery_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/movetest"
	"github.com/xkeeper/xkeeper/recovery"
	"github.com/xkeeper/xkeeper/testenv"
)

func TestMain(m *testing.M) {
	testenv.SkipExamplesWithoutClickHouse()
	goleak.VerifyTestMain(m)
}

// result is how an xkeeper process ended.
type result struct {
	code   int  // exit code; -1 when killed by a signal
	killed bool // by SIGKILL (a fail point)
	out    string
}

// xkeeper runs the binary with the workflow's cluster file; failPoint, if
// not empty, is the step boundary where it kills itself.
func xkeeper(t *testing.T, e movetest.Env, failPoint string, args ...string) result {
	t.Helper()
	return run(t, e.ConfigPath, failPoint, args...)
}

// run runs the binary with cluster file configPath; failPoint, if not
// empty, is the step boundary where it kills itself.
func run(t *testing.T, configPath, failPoint string, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(movetest.Ctx(t), testenv.XkeeperBinary(t), append([]string{"--config", configPath}, args...)...)
	cmd.Env = append(os.Environ(), "XKEEPER_FAILPOINT="+failPoint)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	r := result{out: out.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			r.killed = true
		}
	default:
		t.Fatalf("xkeeper %v: %v", args, err)
	}
	return r
}

// TestRecovery kills the moving process at every step boundary and
// checks that recover, run twice at once, ends every move where it must
// (rolled back before the commit point, finished after it) and leaves
// nothing behind; then injects each anomaly the audit must report.
func TestRecovery(t *testing.T) {
	e := movetest.Start(t)
	t.Run("CrashAnywhere", func(t *testing.T) { testCrashAnywhere(t, e) })
	t.Run("CrashInRecover", func(t *testing.T) { testCrashInRecover(t, e) })
	t.Run("AuditFindsAnomalies", func(t *testing.T) { testAnomalies(t, e) })
	t.Run("AdviceKeepsLaterRows", func(t *testing.T) { testAdviceKeepsLaterRows(t, e) })
}

// testAdviceKeepsLaterRows: a move killed between replacing the destination
// and dropping the source (plain tables, which no fence guards), then rows
// inserted into the source: the audit reports the partition in both tables
// but does not advise dropping it, and recover leaves it (and the rows).
func testAdviceKeepsLaterRows(t *testing.T, e movetest.Env) {
	src := e.NewTable(t, "ca:adv.src", false, 400, 1)
	dst := e.NewTable(t, "cb:adv.dst", false, 0, 2)
	r := xkeeper(t, e, string(movepart.PointDestinationReplaced), "partition", "move", "--from", src.Ref.String(), "--to", dst.Ref.String(),
		"--partition", movetest.Partition, "--session-timeout", "2s")
	require.True(t, r.killed, "exit %d\n%s", r.code, r.out)
	src.Insert(t, "2024-01-03", 10, 99)
	var found bool
	for _, f := range e.Audit(t).Findings {
		if f.Kind == recovery.PartitionInBoth {
			found = true
			assert.NotContains(t, f.Action, "drop", "%s", f.Detail)
		}
	}
	assert.True(t, found, "the partition is in both tables")
	r = xkeeper(t, e, "", "recover", "--commit", "--session-timeout", "2s")
	assert.Equal(t, 3, r.code, "the move is left to an operator:\n%s", r.out)
	assert.Equal(t, uint64(410), e.Fingerprint(t, src.Ref, movetest.Partition).Rows, "no row of the source dropped")
}

// TestRecoveryOnNodes runs recover and audit on a node cluster (three
// nodes, each hosting a member of both shards, the ClickHouse servers on
// the nodes' endpoints): a move killed before and after its commit point,
// then recover killed too, ends rolled back and finished; the audit finds
// the anomalies.
func TestRecoveryOnNodes(t *testing.T) {
	e := movetest.StartOnNodes(t)
	t.Run("CrashInRecover", func(t *testing.T) { testCrashInRecover(t, e) })
	t.Run("AuditFindsAnomalies", func(t *testing.T) { testAnomalies(t, e) })
}

func testCrashAnywhere(t *testing.T, e movetest.Env) {
	for i, kind := range []movepart.Kind{movepart.Move, movepart.Attach} {
		for j, p := range movepart.Points {
			if p == movepart.PointRollbackDropped || kind == movepart.Attach && p == movepart.PointSourceDropped {
				continue // not passed by a move that goes through
			}
			t.Run(fmt.Sprintf("%s/%s", kind, p), func(t *testing.T) {
				// Moves cross servers; attaches stay on one server, across shards.
				db := fmt.Sprintf("c%d_%d", i, j)
				src := e.NewTable(t, "ca:"+db+".src", kind == movepart.Move, 1500, j+1)
				dstRef := "cb:" + db + ".dst"
				if kind == movepart.Attach {
					dstRef = "ca:onb.dst" + db
				}
				dst := e.NewTable(t, dstRef, false, 70, 50+j)
				s := e.Snapshot(t, src, dst)
				r := xkeeper(t, e, string(p), "partition", string(kind), "--from", src.Ref.String(), "--to", dst.Ref.String(),
					"--partition", movetest.Partition, "--session-timeout", "2s")
				if !r.killed {
					t.Fatalf("the move was not killed at %s: exit %d\n%s", p, r.code, r.out)
				}
				// Left in flight (except after the last step): the audit
				// says so and names what recover will do.
				rep := e.Audit(t)
				i := slices.IndexFunc(rep.Findings, func(f recovery.Finding) bool { return f.Kind == recovery.UnfinishedMove })
				if p != movepart.PointDone && i < 0 {
					t.Fatalf("audit after a crash at %s found no unfinished move: %+v", p, rep.Findings)
				}
				if i >= 0 && !strings.Contains(rep.Findings[i].Action, map[bool]string{true: "finish", false: "roll it back"}[forward(p)]) {
					t.Errorf("audit action %q after a crash at %s", rep.Findings[i].Action, p)
				}
				if a := xkeeper(t, e, "", "audit"); (a.code == 3) != (p != movepart.PointDone) {
					t.Errorf("xkeeper audit exit %d after a crash at %s\n%s", a.code, p, a.out)
				}
				recoverTwiceAtOnce(t, e.ConfigPath)
				if forward(p) {
					e.CheckDone(t, kind, s)
				} else {
					e.CheckUntouched(t, s)
				}
			})
		}
	}
}

// forward reports whether a crash at p leaves a move recovery finishes.
func forward(p movepart.Point) bool {
	return !slices.Contains([]movepart.Point{movepart.PointIntent, movepart.PointStagingCreated, movepart.PointStagingFilled, movepart.PointStaged}, p)
}

// recoverTwiceAtOnce runs two `xkeeper recover --commit` at once: both end
// with nothing left (exit 0), whichever drove the moves.
func recoverTwiceAtOnce(t *testing.T, configPath string) {
	t.Helper()
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = run(t, configPath, "", "recover", "--commit", "--session-timeout", "2s")
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("recover %d: exit %d\n%s", i, r.code, r.out)
		}
	}
	if r := run(t, configPath, "", "recover", "--commit"); r.code != 0 || !strings.Contains(r.out, "clean") {
		t.Errorf("recover after recover: exit %d\n%s", r.code, r.out)
	}
}

// testCrashInRecover kills a recover in the middle of a rollback and of a
// roll forward; the next recover finishes both.
func testCrashInRecover(t *testing.T, e movetest.Env) {
	src1 := e.NewTable(t, "ca:cr1.src", false, 900, 1)
	dst1 := e.NewTable(t, "cb:cr1.dst", false, 0, 2)
	src2 := e.NewTable(t, "ca:cr2.src", false, 900, 3)
	dst2 := e.NewTable(t, "cb:cr2.dst", true, 30, 4)
	s1, s2 := e.Snapshot(t, src1, dst1), e.Snapshot(t, src2, dst2)
	// One move at a time, so that each recover meets its fail point.
	for _, c := range []struct {
		s         movetest.Snapshot
		at, again movepart.Point
	}{{s1, movepart.PointStaged, movepart.PointRollbackDropped}, {s2, movepart.PointCommitted, movepart.PointDestinationReplaced}} {
		r := xkeeper(t, e, string(c.at), "partition", "move", "--from", c.s.Src.Ref.String(), "--to", c.s.Dst.Ref.String(),
			"--partition", movetest.Partition, "--session-timeout", "2s")
		if !r.killed {
			t.Fatalf("move not killed at %s: exit %d\n%s", c.at, r.code, r.out)
		}
		if r := xkeeper(t, e, string(c.again), "recover", "--commit", "--session-timeout", "2s"); !r.killed {
			t.Fatalf("recover not killed at %s: exit %d\n%s", c.again, r.code, r.out)
		}
	}
	recoverTwiceAtOnce(t, e.ConfigPath)
	e.CheckUntouched(t, s1)
	e.CheckDone(t, movepart.Move, s2)
}

// testAnomalies injects by hand what the audit must find: a partition
// duplicated after a move, one lost after a move, a stray lock and a stray
// staging table. Recover removes the strays and leaves the data findings
// to an operator.
func testAnomalies(t *testing.T, e movetest.Env) {
	src := e.NewTable(t, "ca:an.src", false, 500, 1)
	dst := e.NewTable(t, "ca:onb.an_dst", false, 0, 2)
	src2 := e.NewTable(t, "ca:an.src2", false, 500, 3)
	dst2 := e.NewTable(t, "cb:an.dst2", false, 0, 4)
	for _, pair := range [][2]movetest.Table{{src, dst}, {src2, dst2}} {
		if r := xkeeper(t, e, "", "partition", "move", "--from", pair[0].Ref.String(), "--to", pair[1].Ref.String(), "--partition", movetest.Partition); r.code != 0 {
			t.Fatalf("move: exit %d\n%s", r.code, r.out)
		}
	}
	e.CheckClean(t)
	// Duplicated: the moved partition attached back to its source.
	src.Exec(t, "ALTER TABLE an.src ATTACH PARTITION ID '"+movetest.Partition+"' FROM onb.an_dst")
	// Lost: the moved partition dropped from its destination.
	dst2.Exec(t, "ALTER TABLE an.dst2 DROP PARTITION ID '"+movetest.Partition+"'")
	// A lock naming a move that does not exist.
	c, err := client.Connect(movetest.Ctx(t), e.Keepers.Servers("b"), movepart.AuthOptions(e.Config)...)
	require.NoError(t, err)
	defer c.Close()
	ghost := "0f0f0f0f-1111-2222-3333-444444444444"
	lockRef := movetest.Ref(t, "cb:an.dst2")
	lock := fmt.Sprintf(`{"move":%q,"table":{"server":"cb","database":"an","table":"dst2"},"partition":"209912"}`, ghost)
	if _, err := c.Create(movetest.Ctx(t), movepart.LocksDir+"/"+movepart.LockName(lockRef, "209912"), []byte(lock), 0, movepart.ACL(e.Config)); err != nil {
		t.Fatal(err)
	}
	// A staging table of that move.
	dst2.Exec(t, "CREATE TABLE an."+movepart.StagingName(ghost)+" (x UInt8) ENGINE = MergeTree ORDER BY x")

	want := map[recovery.Kind]bool{recovery.PartitionInBoth: false, recovery.PartitionMissing: false, recovery.StrayLock: false, recovery.StrayStaging: false}
	for _, f := range e.Audit(t).Findings {
		if _, ok := want[f.Kind]; !ok {
			t.Errorf("unexpected finding %s: %s", f.Kind, f.Detail)
		}
		want[f.Kind] = true
		t.Logf("%s: %s", f.Kind, f.Detail)
	}
	for k, found := range want {
		if !found {
			t.Errorf("audit did not report %s", k)
		}
	}
	r := xkeeper(t, e, "", "audit", "--format", "json")
	if r.code != 3 || !strings.Contains(r.out, `"kind":"stray-lock"`) {
		t.Errorf("xkeeper audit: exit %d, want 3 with a JSON report\n%s", r.code, r.out)
	}
	// Recover removes the strays; the data findings stay for an operator.
	if r := xkeeper(t, e, "", "recover", "--commit"); r.code != 3 {
		t.Errorf("recover: exit %d, want 3 (data findings left)\n%s", r.code, r.out)
	}
	for _, f := range e.Audit(t).Findings {
		if f.Kind != recovery.PartitionInBoth && f.Kind != recovery.PartitionMissing {
			t.Errorf("left after recover: %s: %s", f.Kind, f.Detail)
		}
	}
	testSettleHistory(t, e)
}

// testSettleHistory: the data findings left are history (about finished
// moves); each can be acknowledged by id, with who and why kept, and then
// no longer counts; with all of them acknowledged audit and recover exit
// 0, and --all still lists them. Findings of work in flight cannot be
// acknowledged. Past audit.journal_max_age they age out.
func testSettleHistory(t *testing.T, e movetest.Env) {
	var ids []string
	for _, f := range e.Audit(t).Findings {
		require.True(t, f.History, "%s is about a finished move", f.ID)
		assert.False(t, f.Settled())
		ids = append(ids, f.ID)
	}
	require.Len(t, ids, 2)
	t.Setenv("XKEEPER_AUDIT_JOURNAL_MAX_AGE", "1ms")
	r := xkeeper(t, e, "", "audit", "--format", "json")
	assert.Equal(t, 0, r.code, "aged out, nothing is open:\n%s", r.out)
	assert.Contains(t, r.out, `"aged_out":true`)
	t.Setenv("XKEEPER_AUDIT_JOURNAL_MAX_AGE", "0s")

	r = xkeeper(t, e, "", "audit", "ack", ids[0], "--note", "dropped on purpose")
	require.Equal(t, 0, r.code, r.out)
	r = xkeeper(t, e, "", "audit")
	assert.Equal(t, 3, r.code, "one is still open:\n%s", r.out)
	assert.NotContains(t, r.out, ids[0])
	assert.Contains(t, r.out, "1 acknowledged or aged-out findings not shown")
	r = xkeeper(t, e, "", "audit", "ack", "stray-lock/nothing")
	assert.Equal(t, 1, r.code, "no such finding:\n%s", r.out)
	r = xkeeper(t, e, "", "audit", "ack", ids[1])
	require.Equal(t, 0, r.code, r.out)
	r = xkeeper(t, e, "", "audit")
	assert.Equal(t, 0, r.code, r.out)
	assert.Contains(t, r.out, "clean")
	r = xkeeper(t, e, "", "audit", "--all")
	assert.Equal(t, 0, r.code, r.out)
	assert.Contains(t, r.out, ids[0])
	assert.Contains(t, r.out, "dropped on purpose")
	r = xkeeper(t, e, "", "recover", "--commit")
	assert.Equal(t, 0, r.code, "recover leaves nothing open:\n%s", r.out)
	for _, f := range e.Audit(t).Findings {
		require.NotNil(t, f.Acknowledged, f.ID)
		assert.Contains(t, f.Acknowledged.By, "@", "who, at which host")
	}
}
