package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/bench"
	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/backup"
	"github.com/xkeeper/xkeeper/keeper/nodelog"
	"github.com/xkeeper/xkeeper/keeper/zkimport"
	"github.com/xkeeper/xkeeper/testenv"
)

// clusterFile starts an in-process cluster and writes its cluster file.
func clusterFile(t *testing.T, shards int) string {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: shards, Members: 1})
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, c.Config.Write(cfg))
	return cfg
}

// failsWith runs a command with --format json and checks that it exits
// with exit and prints one error document; it returns the document.
func failsWith(t *testing.T, exit int, args ...string) errorBody {
	t.Helper()
	code, out, _ := xk(t, append(args, "--format", "json")...)
	require.Equal(t, exit, code, "%v", args)
	var doc errorDoc
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&doc), "stdout %q", out)
	assert.False(t, dec.More(), "one document")
	assert.Equal(t, exit, doc.Error.Exit)
	assert.NotEmpty(t, doc.Error.Message)
	return doc.Error
}

// TestJSONErrorsNameTheirCause: under --format json a failing command
// prints one error document whose code names the cause, with the shard,
// op, ZooKeeper code and transaction where there are some; exit codes stay.
func TestJSONErrorsNameTheirCause(t *testing.T) {
	cfg := clusterFile(t, 2)
	e := failsWith(t, exitUsage, "tx", "list")
	assert.Equal(t, "usage", e.Code)

	tx := writeFile(t, "tx.yaml", "shards:\n  - shard: a\n    ops:\n      - create: /x\n  - shard: b\n    ops:\n      - create: /y\n")
	code, _, stderr := xk(t, "tx", "apply", "--config", cfg, tx)
	require.Equal(t, exitOK, code, stderr)
	e = failsWith(t, exitFailure, "tx", "apply", "--config", cfg, tx)
	assert.Equal(t, "node_exists", e.Code)
	assert.Equal(t, "a", e.Shard)
	require.NotNil(t, e.Op)
	assert.Equal(t, 0, *e.Op)
	require.NotNil(t, e.ZKCode)
	assert.Equal(t, int32(-110), *e.ZKCode)
	assert.NotEmpty(t, e.Transaction)

	cli := []string{"client", "--config", cfg, "--shard", "a"}
	e = failsWith(t, exitFailure, append(cli, "set", "/x", "v", "7")...)
	assert.Equal(t, "bad_version", e.Code)
	e = failsWith(t, exitFailure, append(cli, "get", "/missing")...)
	assert.Equal(t, "no_node", e.Code)
	e = failsWith(t, exitUsage, append(cli, "frobnicate", "/")...)
	assert.Equal(t, "usage", e.Code)
}

// TestClientCommandsLogNothing: at the default level a client command
// writes nothing on stderr; --log-level info brings the logs back.
func TestClientCommandsLogNothing(t *testing.T) {
	cfg := clusterFile(t, 1)
	code, out, stderr := xk(t, "client", "--config", cfg, "--shard", "a", "ls", "/")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "zookeeper")
	assert.Empty(t, stderr)
	code, _, stderr = xk(t, "client", "--config", cfg, "--shard", "a", "ls", "/", "--log-level", "info")
	require.Equal(t, exitOK, code)
	assert.Contains(t, stderr, "session established")
}

// TestConfigCommands: check validates and names bad keys, print shows the
// environment's overrides with the secrets masked, default prints a file
// that loads.
func TestConfigCommands(t *testing.T) {
	c := testenv.NewClusterConfig(t, t.TempDir(), 1, 3)
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, c.Write(cfg))

	code, out, _ := xk(t, "config", "check", "--config", cfg)
	require.Equal(t, exitOK, code)
	assert.Equal(t, "ok: 1 shards, 3 members, 0 ClickHouse servers\n", out)
	bad := writeFile(t, "bad.yaml", "shards:\n  - name: a\n    memberz: []\n")
	e := failsWith(t, exitUsage, "config", "check", "--config", bad)
	assert.Contains(t, e.Message, `unknown key "shards[0].memberz"`)

	t.Setenv("XKEEPER_KEEPER_TICK", "750ms")
	t.Setenv("XKEEPER_SECURITY_AUTH", "ops:hunter2")
	code, out, _ = xk(t, "config", "print", "--config", cfg, "--format", "json")
	require.Equal(t, exitOK, code)
	assert.NotContains(t, out, "hunter2")
	assert.NotContains(t, out, c.Security.ClusterSecret)
	var printed config.Cluster
	require.NoError(t, json.Unmarshal([]byte(out), &printed))
	assert.Equal(t, "750ms", printed.Keeper.Tick.String())
	assert.Equal(t, "ops:"+config.Masked, printed.Security.Auth)
	assert.Equal(t, config.Masked, printed.Security.ClusterSecret)

	code, out, _ = xk(t, "config", "default")
	require.Equal(t, exitOK, code)
	def := writeFile(t, "default.yaml", out)
	code, _, stderr := xk(t, "config", "check", "--config", def)
	assert.Equal(t, exitOK, code, stderr)
}

// TestVersion prints the Go version and a commit in both formats.
func TestVersion(t *testing.T) {
	code, out, _ := xk(t, "version", "--format", "json")
	require.Equal(t, exitOK, code)
	var b buildInfo
	require.NoError(t, json.Unmarshal([]byte(out), &b))
	assert.Equal(t, runtime.Version(), b.Go)
	assert.NotEmpty(t, b.Version)
	code, out, _ = xk(t, "version")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, runtime.Version())
}

// TestSnapshotCommands saves a backup of a running shard, checks it with
// status, restores it into a new cluster's member and serves it there; a
// damaged backup and a data directory in use are refused with their codes.
func TestSnapshotCommands(t *testing.T) {
	cfg := clusterFile(t, 1)
	code, _, stderr := xk(t, "client", "--config", cfg, "--shard", "a", "create", "/kept", "v1")
	require.Equal(t, exitOK, code, stderr)
	file := filepath.Join(t.TempDir(), "a.xkbackup")
	code, out, stderr := xk(t, "snapshot", "save", "--config", cfg, "--shard", "a", file, "--format", "json")
	require.Equal(t, exitOK, code, stderr)
	var saved struct {
		File   string
		Bytes  int64
		Header backup.Header
	}
	require.NoError(t, json.Unmarshal([]byte(out), &saved))
	assert.Equal(t, "a", saved.Header.Shard)
	assert.Positive(t, saved.Bytes)

	code, out, stderr = xk(t, "snapshot", "status", file, "--format", "json")
	require.Equal(t, exitOK, code, stderr)
	var status backupStatus
	require.NoError(t, json.Unmarshal([]byte(out), &status))
	assert.Equal(t, saved.Header.Zxid, status.Header.Zxid)
	assert.GreaterOrEqual(t, status.Znodes, 2, "/ and /kept at least")

	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	raw[len(raw)/2] ^= 1
	bad := writeFile(t, "bad.xkbackup", string(raw))
	assert.Equal(t, "corrupt_backup", failsWith(t, exitFailure, "snapshot", "status", bad).Code)

	dst := testenv.NewClusterConfig(t, t.TempDir(), 1, 1)
	dstFile := filepath.Join(t.TempDir(), "restored.yaml")
	require.NoError(t, dst.Write(dstFile))
	assert.Equal(t, "corrupt_backup", failsWith(t, exitFailure, "snapshot", "restore", "--config", dstFile, bad).Code)
	code, out, stderr = xk(t, "snapshot", "restore", "--config", dstFile, file)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "as shard a")
	assert.Equal(t, "not_empty", failsWith(t, exitFailure, "snapshot", "restore", "--config", dstFile, file).Code)

	testenv.StartConfig(t, dst, testenv.ClusterOptions{})
	code, out, stderr = xk(t, "client", "--config", dstFile, "--shard", "a", "get", "/kept")
	require.Equal(t, exitOK, code, stderr)
	assert.Equal(t, "v1\n", out)
}

// TestMemberCommands adds a joining member to a running shard, lists the
// shard, and removes the member again; a member the cluster file does not
// name is a usage error, and one that is not running is refused.
func TestMemberCommands(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 1})
	id := c.Grow("a")
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, c.Config.Write(cfg))
	assert.Equal(t, "unreachable", failsWith(t, exitFailure, "member", "add", "--config", cfg, id, "--timeout", "5s").Code,
		"a member that is not running")
	c.Join(id)
	code, out, stderr := xk(t, "member", "add", "--config", cfg, id)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "added "+id)

	code, out, stderr = xk(t, "member", "list", "--config", cfg, "--shard", "a", "--format", "json")
	require.Equal(t, exitOK, code, stderr)
	var ms keeper.Membership
	require.NoError(t, json.Unmarshal([]byte(out), &ms))
	require.Len(t, ms.Members, 2)
	for _, m := range ms.Members {
		assert.True(t, m.InFile && m.Reachable, "%+v", m)
		require.NotNil(t, m.Replicated)
		assert.True(t, m.Replicated.Voter)
	}
	assert.Empty(t, ms.Disagreements)

	code, _, stderr = xk(t, "member", "remove", "--config", cfg, "--shard", "a", id)
	require.Equal(t, exitOK, code, stderr)
	code, out, _ = xk(t, "member", "list", "--config", cfg, "--shard", "a")
	require.Equal(t, exitOK, code)
	assert.Contains(t, out, "member "+id+" is in the cluster file but not in the replicated configuration")
	assert.Equal(t, "usage", failsWith(t, exitUsage, "member", "add", "--config", cfg, "z9").Code)
}

// TestImportZooKeeper imports a stopped ZooKeeper's files into a backup,
// which restore then needs a shard for; the flags are checked first.
func TestImportZooKeeper(t *testing.T) {
	assert.Equal(t, "usage", failsWith(t, exitUsage, "import", "zookeeper", "--out", "x").Code)
	assert.Equal(t, "usage", failsWith(t, exitUsage, "import", "zookeeper", "--snapshot-dir", "d", "--servers", "s", "--out", "x").Code)
	z := testenv.StartZooKeeper(t, 1)
	conn, err := bench.Connect(z.Servers())
	require.NoError(t, err)
	_, err = conn.Create("/from-zookeeper", []byte("v"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	conn.Close()
	z.Stop()

	out := filepath.Join(t.TempDir(), "zk.xkbackup")
	code, stdout, stderr := xk(t, "import", "zookeeper", "--snapshot-dir", z.DataDir(0), "--out", out, "--format", "json")
	require.Equal(t, exitOK, code, stderr)
	var doc struct{ Summary zkimport.Summary }
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc))
	assert.Equal(t, 5, doc.Summary.Znodes, "/, /zookeeper, its quota and config, /from-zookeeper")
	code, stdout, stderr = xk(t, "snapshot", "status", out)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "5 znodes")
	e := failsWith(t, exitUsage, "snapshot", "restore", "--config", clusterFile(t, 1), out)
	assert.Contains(t, e.Message, "--shard is required")
}

// TestNodePrune: node prune refuses a running node (in_use) and a call
// without --node; on the stopped node it lists each group of its log with
// the member directory that names it, in text and in JSON.
func TestNodePrune(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Nodes: 3})
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, c.Config.Write(cfg))
	assert.Equal(t, "usage", failsWith(t, exitUsage, "node", "prune", "--config", cfg).Code)
	assert.Equal(t, "in_use", failsWith(t, exitFailure, "node", "prune", "--config", cfg, "--node", "n1").Code)

	c.KillNode("n1")
	code, out, stderr := xk(t, "node", "prune", "--config", cfg, "--node", "n1")
	require.Equal(t, exitOK, code, stderr)
	dir := c.Config.Shards[0].Members[0].DataDir
	assert.Contains(t, out, "member directory "+dir)
	assert.NotContains(t, out, "dropped")
	doc := succeedsWithJSON(t, "node", "prune", "--config", cfg, "--node", "n1", "--commit")
	groups := doc.(map[string]any)["groups"].([]any)
	require.Len(t, groups, 1)
	assert.Equal(t, dir, groups[0].(map[string]any)["data_dir"])
}

// TestNodeAdopt: node adopt lists a stopped node's members with their own
// raft-wal logs, refuses to move them while keeper.log_store says wal,
// moves them once it is unset (JSON), after which the node starts, and
// refuses a running node (in_use).
func TestNodeAdopt(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Nodes: 3,
		Keeper: func(k *config.Keeper) { k.LogStore = "wal" }})
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, c.Config.Write(cfg))
	assert.Equal(t, "in_use", failsWith(t, exitFailure, "node", "adopt", "--config", cfg, "--node", "n1").Code)

	c.KillNode("n1")
	code, out, stderr := xk(t, "node", "adopt", "--config", cfg, "--node", "n1")
	require.Equal(t, exitOK, code, stderr)
	dir := c.Config.Shards[0].Members[0].DataDir
	assert.Regexp(t, regexp.QuoteMeta(dir)+`\tits own wal log, \d+ entries: would be moved`, out)
	e := failsWith(t, exitFailure, "node", "adopt", "--config", cfg, "--node", "n1", "--commit")
	assert.Contains(t, e.Message, "keeper.log_store")

	c.Config.Keeper.LogStore = ""
	require.NoError(t, c.Config.Write(cfg))
	doc := succeedsWithJSON(t, "node", "adopt", "--config", cfg, "--node", "n1", "--commit")
	members := doc.(map[string]any)["members"].([]any)
	require.Len(t, members, 1)
	assert.Equal(t, true, members[0].(map[string]any)["moved"])
	c.RestartNode("n1")
}

// TestNodeClearFailure: a node whose Raft log recorded a failed write does
// not start (write_failed); node clear-failure prints the record without
// --commit and deletes it with --commit, after which the node starts; it
// refuses a running node (in_use) and says when there is nothing to clear.
func TestNodeClearFailure(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Nodes: 3})
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, c.Config.Write(cfg))
	code, out, stderr := xk(t, "node", "clear-failure", "--config", cfg, "--node", "n1")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "records no failed write")

	c.KillNode("n1")
	file := filepath.Join(c.Config.Nodes[0].DataDir, "nodelog", nodelog.FailedFile)
	require.NoError(t, os.WriteFile(file, []byte("fdatasync: input/output error\n"), 0o600))
	_, err := keeper.StartNode(c.Config, "n1", keeper.Options{})
	require.ErrorIs(t, err, nodelog.ErrWriteFailed)

	code, out, stderr = xk(t, "node", "clear-failure", "--config", cfg, "--node", "n1")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "fdatasync: input/output error")
	assert.Contains(t, out, "--commit")
	assert.FileExists(t, file)
	doc := succeedsWithJSON(t, "node", "clear-failure", "--config", cfg, "--node", "n1", "--commit")
	failures := doc.(map[string]any)["failures"].([]any)
	require.Len(t, failures, 1)
	assert.Equal(t, true, failures[0].(map[string]any)["cleared"])
	assert.NoFileExists(t, file)
	c.RestartNode("n1")
	c.WaitLeader("a")

	require.NoError(t, os.WriteFile(file, []byte("x\n"), 0o600))
	assert.Equal(t, "in_use", failsWith(t, exitFailure, "node", "clear-failure", "--config", cfg, "--node", "n1", "--commit").Code)
}
