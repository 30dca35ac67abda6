package testenv

import (
	"testing"
)

// TestProcessClusterFailsOver starts a 3-member shard as processes, kills
// the leader's process and sees another member lead.
func TestProcessClusterFailsOver(t *testing.T) {
	pc := StartProcessCluster(t, ClusterOptions{Members: 3})
	leader := pc.WaitLeader("a")
	pc.Kill(leader)
	<-pc.Process(leader).Done()
	var next string
	for next == "" || next == leader {
		next = pc.WaitLeader("a")
	}
	pc.Start(leader)
	if pc.Process(leader).PID() == 0 {
		t.Fatal("restarted member has no process")
	}
}
