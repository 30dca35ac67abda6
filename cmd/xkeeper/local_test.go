package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestLocalServesShardsAndMetrics runs `xkeeper local` as a process: it
// prints its shards, its nodes, their endpoint and every member's metrics
// URL, every member of a node has the node's peer port, the shards and the
// endpoint (with a mount) answer client commands, /metrics answers, and
// SIGINT stops it cleanly.
func TestLocalServesShardsAndMetrics(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(testenv.XkeeperBinary(t), "local", "--dir", dir, "--shards", "2", "--mount", "/t=b", "--format", "json")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	var got struct {
		Config   string            `json:"config"`
		Shards   map[string]string `json:"shards"`
		Nodes    map[string]string `json:"nodes"`
		Endpoint string            `json:"endpoint"`
		Metrics  []string          `json:"metrics"`
	}
	require.NoError(t, json.NewDecoder(bufio.NewReader(stdout)).Decode(&got))
	assert.Len(t, got.Shards, 2)
	require.Len(t, got.Metrics, 6)
	require.Len(t, got.Nodes, 3, "three nodes by default")
	c, err := config.Load(got.Config)
	require.NoError(t, err)
	for _, id := range []string{"a2", "b2"} {
		_, m, err := c.Member(id)
		require.NoError(t, err)
		assert.Equal(t, got.Nodes["n2"], m.RaftAddr, "%s is on node n2's peer port", id)
	}

	code, out, stderr := xk(t, "client", "--config", got.Config, "--shard", "b", "ls", "/")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "zookeeper")
	// The nodes' one endpoint: /t and below live on shard b.
	assert.Len(t, strings.Split(got.Endpoint, ","), 3)
	for _, args := range [][]string{{"create", "/t"}, {"create", "/t/k", "v"}} {
		code, _, stderr = xk(t, append([]string{"client", "--servers", got.Endpoint}, args...)...)
		require.Equal(t, exitOK, code, stderr)
	}
	code, out, stderr = xk(t, "client", "--config", got.Config, "--shard", "b", "get", "/t/k")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, out, "v")
	resp, err := http.Get(got.Metrics[1])
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, strings.Contains(string(body), `xkeeper_znodes{member="a2",shard="a"}`), "the member's own series")
	// The endpoint's own series are on its node's member of the root shard.
	routed := false
	for _, url := range got.Metrics[:3] {
		resp, err := http.Get(url)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Contains(t, string(body), "xkeeper_endpoint_connections")
		routed = routed || strings.Contains(string(body), `to="b"`)
	}
	assert.True(t, routed, "a request routed to shard b is counted")

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	done := make(chan error, 1)
	go func() { io.Copy(io.Discard, stdout); done <- cmd.Wait() }()
	select {
	case err := <-done:
		assert.NoError(t, err, "a clean stop")
	case <-time.After(30 * time.Second):
		t.Fatal("no exit 30 s after SIGINT")
	}
}
