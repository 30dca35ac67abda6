package fsm_test

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestNewerEntryStopsTheMemberAtEveryStart: README's "a member ... still
// on the older binary exits on such an entry, and again at each start,
// until it runs the new one". A committed log entry of version
// fsm.EntryNewest+1 (what a newer binary writes) stands in the Raft log of
// a member (`xkeeper serve`, a shard of one, its log in raft.db); at each
// start the member commits it, and the process exits with an error that
// names the entry and its version instead of applying it, twice in a row.
func TestNewerEntryStopsTheMemberAtEveryStart(t *testing.T) {
	pc := testenv.StartProcessCluster(t, testenv.ClusterOptions{Members: 1, Keeper: func(k *config.Keeper) { k.LogStore = "bolt" }})
	m := pc.Config.Shards[0].Members[0]
	pc.WaitLeader("a")
	require.True(t, pc.Process(m.ID).Stop(10*time.Second), "the member stops on SIGTERM")

	// Append the entry to the member's log, in its last term.
	logs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(m.DataDir, "raft.db")})
	require.NoError(t, err)
	last, err := logs.LastIndex()
	require.NoError(t, err)
	var prev raft.Log
	require.NoError(t, logs.GetLog(last, &prev))
	entry := fsm.EncodeEntry(nil, time.Now().UnixMilli(), []fsm.Request{{ID: 1, Member: m.ID, Op: proto.OpSync,
		Body: proto.Marshal(&proto.PathRequest{Path: "/"})}})
	require.LessOrEqual(t, entry[1], fsm.EntryNewest)
	entry[1] = fsm.EntryNewest + 1
	require.NoError(t, logs.StoreLog(&raft.Log{Index: last + 1, Term: prev.Term, Type: raft.LogCommand, Data: entry}))
	require.NoError(t, logs.Close())

	want := fmt.Sprintf("log entry %d: fsm: entry version %d is newer than this binary knows (%d)", last+1, fsm.EntryNewest+1, fsm.EntryNewest)
	for start := 1; start <= 2; start++ {
		var out bytes.Buffer
		serve := exec.Command(testenv.XkeeperBinary(t), "serve", "--config", pc.File, "--member", m.ID, "--log-level", "warn")
		serve.Stdout, serve.Stderr = &out, &out
		require.NoError(t, serve.Start())
		exited := make(chan error, 1)
		go func() { exited <- serve.Wait() }()
		select {
		case err = <-exited:
		case <-time.After(30 * time.Second):
			require.NoError(t, serve.Process.Kill())
			<-exited
			require.Failf(t, "the member did not exit", "start %d:\n%s", start, out.String())
		}
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "start %d: the member exits with an error:\n%s", start, out.String())
		assert.NotZero(t, exit.ExitCode(), "start %d", start)
		assert.Contains(t, out.String(), want, "start %d", start)
	}
}
