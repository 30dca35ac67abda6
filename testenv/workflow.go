package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
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
	return w.start(t, w.Keepers.Servers("a"), w.Keepers.Servers("b"))
}

// StartWorkflowOnNodes is StartWorkflow with the shards on three nodes,
// and both ClickHouse servers using the nodes' one endpoint as their
// ZooKeeper (their own znodes on the root shard, a).
func StartWorkflowOnNodes(t testing.TB) *Workflow {
	t.Helper()
	w := &Workflow{Keepers: StartCluster(t, ClusterOptions{Shards: 2, Nodes: 3})}
	t.Cleanup(w.Keepers.Stop)
	var eps []string
	for _, n := range w.Keepers.Config.Nodes {
		eps = append(eps, w.Keepers.Endpoint(n.Name))
	}
	return w.start(t, eps, eps)
}

// start starts the ClickHouse servers, ca with zkA as its ZooKeeper and cb
// with zkB, and writes the cluster file.
func (w *Workflow) start(t testing.TB, zkA, zkB []string) *Workflow {
	t.Helper()
	w.A = StartClickHouse(t, ClickHouseOptions{ZooKeeper: zkA, Replica: "ra"})
	w.B = StartClickHouse(t, ClickHouseOptions{ZooKeeper: zkB, Replica: "rb"})
	c, err := workflowConfig(w.Keepers.Config, w.A, w.B)
	if err != nil {
		t.Fatal(err)
	}
	w.Config = c
	w.ConfigPath = filepath.Join(t.TempDir(), "cluster.yaml")
	if err := c.Write(w.ConfigPath); err != nil {
		t.Fatal(err)
	}
	return w
}

// workflowConfig is keepers' cluster file with servers ca (a) and cb (b)
// and the workflow's table placement.
func workflowConfig(keepers *config.Cluster, a, b *ClickHouse) (*config.Cluster, error) {
	c := *keepers
	c.ClickHouse.Servers = []config.ClickHouseServer{
		{Name: "ca", Address: a.NativeAddr()},
		{Name: "cb", Address: b.NativeAddr()},
	}
	c.Tables = []config.Table{
		{Server: "ca", Shard: "a"},
		{Server: "ca", Database: "onb", Shard: "b"},
		{Server: "cb", Shard: "b"},
	}
	return &c, c.Validate()
}

// EmbeddedWorkflow is the Workflow of runnable examples, which have no
// testing.T: two in-process shards a and b (one member each) and two
// ClickHouse servers, ca on a and cb on b.
type EmbeddedWorkflow struct {
	*Embedded
	A, B *ClickHouse
}

// StartEmbeddedWorkflow starts the shards and the servers; Close stops
// them. It fails with ErrNoClickHouse where ClickHouse is not installed
// (SkipExamplesWithoutClickHouse keeps such examples from running).
func StartEmbeddedWorkflow() (*EmbeddedWorkflow, error) {
	e, err := StartEmbedded(2, 1)
	if err != nil {
		return nil, err
	}
	w := &EmbeddedWorkflow{Embedded: e}
	if w.A, err = LaunchClickHouse(filepath.Join(e.dir, "ca"), ClickHouseOptions{ZooKeeper: e.Servers("a"), Replica: "ra"}); err == nil {
		w.B, err = LaunchClickHouse(filepath.Join(e.dir, "cb"), ClickHouseOptions{ZooKeeper: e.Servers("b"), Replica: "rb"})
	}
	if err == nil {
		e.Config, err = workflowConfig(e.Config, w.A, w.B)
	}
	if err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// CreateEvents creates db.events (d Date, k UInt64), a ReplicatedMergeTree
// partitioned by month, on both servers, and fills partition 202401 of
// ca's with rows rows.
func (w *EmbeddedWorkflow) CreateEvents(ctx context.Context, rows int) error {
	for _, ch := range []*ClickHouse{w.A, w.B} {
		for _, sql := range []string{"CREATE DATABASE IF NOT EXISTS db", "CREATE TABLE db.events (d Date, k UInt64) " +
			"ENGINE = ReplicatedMergeTree('/clickhouse/db/events', '{replica}') PARTITION BY toYYYYMM(d) ORDER BY k"} {
			if _, err := ch.Query(ctx, sql); err != nil {
				return err
			}
		}
	}
	_, err := w.A.Query(ctx, fmt.Sprintf("INSERT INTO db.events SELECT toDate('2024-01-01') + number %% 31, number FROM numbers(%d)", rows))
	return err
}

// Close stops the servers and the shards.
func (w *EmbeddedWorkflow) Close() {
	for _, ch := range []*ClickHouse{w.A, w.B} {
		if ch != nil {
			ch.Stop()
		}
	}
	w.Embedded.Close()
}

// SkipExamplesWithoutClickHouse, called in TestMain before m.Run, keeps
// the package's Example functions from running when ClickHouse is not
// installed, unless XKEEPER_REQUIRE_CLICKHOUSE=1: an example cannot skip
// itself.
func SkipExamplesWithoutClickHouse() {
	if ClickHouseCommand() != nil || os.Getenv(RequireClickHouseEnv) == "1" {
		return
	}
	if !flag.Parsed() {
		flag.Parse()
	}
	skip := "^Example"
	if prev := flag.Lookup("test.skip"); prev != nil && prev.Value.String() != "" {
		skip = prev.Value.String() + "|" + skip
	}
	flag.Set("test.skip", skip)
	fmt.Fprintln(os.Stderr, "testenv: ClickHouse is not installed: the examples that need it do not run")
}

// ReplicatedWorkflow is what the replica-set tests of the partition
// workflows run on: shards a and b (three members each) and four
// ClickHouse servers, ca1 and ca2 using shard a as their ZooKeeper and cb1
// and cb2 using shard b (each server's {replica} macro is its name), all
// named in one cluster file: a table created on ca1 and ca2 has two
// replicas with metadata on a, one on cb1 and cb2 two with metadata on b.
type ReplicatedWorkflow struct {
	Keepers    *Cluster
	Servers    map[string]*ClickHouse // by name: ca1, ca2, cb1, cb2
	Config     *config.Cluster
	ConfigPath string
}

// ReplicatedServers names the servers of a ReplicatedWorkflow, those on
// shard a first.
var ReplicatedServers = []string{"ca1", "ca2", "cb1", "cb2"}

// StartReplicatedWorkflow starts the shards and the servers and writes the
// cluster file. It skips the test when ClickHouse is missing, unless
// XKEEPER_REQUIRE_CLICKHOUSE=1.
func StartReplicatedWorkflow(t testing.TB) *ReplicatedWorkflow {
	t.Helper()
	w := &ReplicatedWorkflow{Keepers: StartCluster(t, ClusterOptions{Shards: 2, Members: 3}), Servers: map[string]*ClickHouse{}}
	c := *w.Keepers.Config
	c.ClickHouse.Servers = nil
	c.Tables = nil
	for _, name := range ReplicatedServers {
		shard := name[1:2] // "a" or "b"
		ch := StartClickHouse(t, ClickHouseOptions{ZooKeeper: w.Keepers.Servers(shard), Replica: name})
		w.Servers[name] = ch
		c.ClickHouse.Servers = append(c.ClickHouse.Servers, config.ClickHouseServer{Name: name, Address: ch.NativeAddr()})
		c.Tables = append(c.Tables, config.Table{Server: name, Shard: shard})
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
