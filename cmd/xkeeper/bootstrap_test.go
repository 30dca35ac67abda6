package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/replica"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestServeOnAnEmptyDirectory: serve refuses a member whose data
// directory is empty unless told how to start it, saying what to run;
// bootstrap marks the directory for the shard's first start, and refuses
// one that holds a member.
func TestServeOnAnEmptyDirectory(t *testing.T) {
	c := testenv.NewClusterConfig(t, t.TempDir(), 1, 3)
	file := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, c.Write(file))
	dir := c.Shards[0].Members[1].DataDir

	code, _, stderr := xk(t, "serve", "--config", file, "--member", "a2")
	assert.NotZero(t, code)
	for _, hint := range []string{"--bootstrap", "xkeeper bootstrap", "member remove --shard a a2", "--join", "member add a2"} {
		assert.Contains(t, stderr, hint)
	}
	empty, err := replica.Empty(dir)
	require.NoError(t, err)
	assert.True(t, empty, "the refused start wrote into the directory")

	code, _, stderr = xk(t, "serve", "--config", file, "--member", "a2", "--join", "--bootstrap")
	assert.NotZero(t, code, stderr)

	code, stdout, stderr := xk(t, "bootstrap", "--config", file, "--member", "a2")
	require.Zero(t, code, stderr)
	assert.Contains(t, stdout, dir)
	marked, err := replica.BootstrapMarked(dir)
	require.NoError(t, err)
	assert.True(t, marked)

	held := c.Shards[0].Members[2].DataDir
	require.NoError(t, os.MkdirAll(held, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(held, "shard-identity"), []byte(replica.NewIdentity()+"\n"), 0o644))
	code, _, stderr = xk(t, "bootstrap", "--config", file, "--member", "a3")
	assert.NotZero(t, code)
	assert.Contains(t, stderr, "already holds")
}
