package testenv

import (
	"path/filepath"
	"testing"

	"github.com/xkeeper/xkeeper/config"
)

// Workflow is what the partition-move tests run on: two in-process keeper
// shards, a and b, of three members each, and two ClickHouse servers,
// "ca" using shard a as its ZooKeeper and "cb" using shard b, all named in
// one cluster file. Tables of ca have their metadata on shard a, except
// those of database "onb", which are on shard b; tables of cb are on b.
type Workflow struct {
	Keepers    *Cluster
	A, B       *ClickHouse
	Config     *config.Cluster
	ConfigPath string // the cluster file, for xkeeper processes
}

// StartWorkflow starts the shards and the servers and writes the cluster
// file. It skips the test when ClickHouse is missing, unless
// XKEEPER_REQUIRE_CLICKHOUSE=1.
func StartWorkflow(t testing.TB) *Workflow {
	t.Helper()
	w := &Workflow{Keepers: StartCluster(t, ClusterOptions{Shards: 2, Members: 3})}
	w.A = StartClickHouse(t, ClickHouseOptions{ZooKeeper: w.Keepers.Servers("a"), Replica: "ra"})
	w.B = StartClickHouse(t, ClickHouseOptions{ZooKeeper: w.Keepers.Servers("b"), Replica: "rb"})
	c := *w.Keepers.Config
	c.ClickHouse.Servers = []config.ClickHouseServer{
		{Name: "ca", Address: w.A.NativeAddr()},
		{Name: "cb", Address: w.B.NativeAddr()},
	}
	c.Tables = []config.Table{
		{Server: "ca", Shard: "a"},
		{Server: "ca", Database: "onb", Shard: "b"},
		{Server: "cb", Shard: "b"},
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	w.Config = &c
	w.ConfigPath = filepath.Join(t.TempDir(), "cluster.yaml")
	if err := c.Write(w.ConfigPath); err != nil {
		t.Fatal(err)
	}
	return w
}
