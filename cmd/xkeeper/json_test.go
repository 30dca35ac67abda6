package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/movepart/movetest"
	"github.com/xkeeper/xkeeper/testenv"
)

// succeedsWithJSON runs a command with --format json, checks that it exits
// 0 and prints exactly one JSON document and nothing on stderr, and
// returns the document.
func succeedsWithJSON(t *testing.T, args ...string) any {
	t.Helper()
	code, out, stderr := xk(t, append(args, "--format", "json")...)
	require.Equal(t, exitOK, code, "%v: %s", args, stderr)
	assert.Empty(t, stderr, "%v logs nothing at the default level", args)
	var doc any
	dec := json.NewDecoder(strings.NewReader(out))
	require.NoError(t, dec.Decode(&doc), "%v: stdout %q", args, out)
	assert.False(t, dec.More(), "%v: one document", args)
	return doc
}

// TestEveryCommandSpeaksJSON runs each client-side command under --format
// json on a workflow cluster (two shards, two ClickHouse servers, an S3),
// once where it succeeds and once where it is refused: every output is one
// JSON document, a refusal the documented error document with the code of
// its cause and its exit code. (serve, local and demo run until stopped
// and print their own start documents; bench is covered by its tests.)
func TestEveryCommandSpeaksJSON(t *testing.T) {
	e := movetest.Start(t)
	s3, err := testenv.StartMemS3("xkeeper")
	require.NoError(t, err)
	t.Cleanup(func() { s3.Close() })
	c := *e.Config
	c.S3 = s3.Config
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, c.Write(cfg))
	e.NewTable(t, "ca:j.src", true, 500, 1)
	e.NewTable(t, "cb:j.dst", true, 0, 2)
	backup := filepath.Join(t.TempDir(), "a.xkbackup")

	for _, args := range [][]string{
		{"client", "--config", cfg, "--shard", "a", "ls", "/"},
		{"client", "--config", cfg, "--shard", "a", "stat", "/zookeeper"},
		{"tx", "list", "--config", cfg},
		{"partition", "move", "--config", cfg, "--from", "ca:j.src", "--to", "cb:j.dst", "--partition", movetest.Partition, "--dry-run"},
		{"partition", "move", "--config", cfg, "--from", "ca:j.src", "--to", "cb:j.dst", "--partition", movetest.Partition},
		{"partition", "moves", "--config", cfg},
		{"audit", "--config", cfg},
		{"audit", "--config", cfg, "--all"},
		{"recover", "--config", cfg},
		{"s3", "ls", "--config", cfg},
		{"s3", "audit", "--config", cfg},
		{"member", "list", "--config", cfg, "--shard", "a"},
		{"snapshot", "save", "--config", cfg, "--shard", "b", backup},
		{"snapshot", "status", backup},
		{"config", "check", "--config", cfg},
		{"config", "print", "--config", cfg},
		{"digest", "user:password"},
		{"version"},
	} {
		succeedsWithJSON(t, args...)
	}

	damaged := filepath.Join(t.TempDir(), "damaged.xkbackup")
	raw, err := os.ReadFile(backup)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(damaged, raw[:len(raw)/2], 0o644))
	for _, r := range []struct {
		code string
		exit int
		args []string
	}{
		{"no_node", exitFailure, []string{"client", "--config", cfg, "--shard", "a", "get", "/nope"}},
		{"refused", exitFailure, []string{"partition", "move", "--config", cfg, "--from", "ca:j.src", "--to", "cb:j.dst", "--partition", "209912"}},
		{"usage", exitUsage, []string{"partition", "move", "--config", cfg, "--from", "ca:j.src", "--to", "nowhere", "--partition", "1"}},
		{"no_reference", exitFailure, []string{"s3", "unlink", "--config", cfg, "ca:j.src/all_1_1_0/data.bin"}},
		{"no_finding", exitFailure, []string{"audit", "ack", "--config", cfg, "no-such-finding"}},
		{"usage", exitUsage, []string{"member", "add", "--config", cfg, "z9"}},
		{"corrupt_backup", exitFailure, []string{"snapshot", "status", damaged}},
		{"usage", exitUsage, []string{"import", "zookeeper", "--out", "x"}},
		{"usage", exitUsage, []string{"digest", "no-colon"}},
		{"usage", exitUsage, []string{"tx", "list"}},
	} {
		assert.Equal(t, r.code, failsWith(t, r.exit, r.args...).Code, "%v", r.args)
	}
}
