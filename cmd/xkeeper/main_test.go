package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/xkeeper/xkeeper/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// xk runs the command in-process and returns its exit code and output.
func xk(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, name, text string) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBadConfigExitsWithUsageCode(t *testing.T) {
	bad := writeFile(t, "c.yaml", "shards:\n  - name: a\n    memberz: []\n")
	code, _, stderr := xk(t, "tx", "list", "--config", bad)
	if code != exitUsage || !strings.Contains(stderr, `unknown key "shards[0].memberz"`) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = xk(t, "serve", "--config", bad)
	if code != exitUsage || !strings.Contains(stderr, "--member") {
		t.Fatalf("serve without --member: exit %d, %q", code, stderr)
	}
	code, _, _ = xk(t, "tx", "list")
	if code != exitUsage {
		t.Fatalf("missing --config: exit %d", code)
	}
}

func TestTxApplyAndList(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 1})
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := c.Config.Write(cfg); err != nil {
		t.Fatal(err)
	}
	tx := writeFile(t, "tx.yaml", `
shards:
  - shard: a
    ops:
      - create: /from
        data: "100"
  - shard: b
    ops:
      - create: /to
        data: "0"
      - create: /log-
        sequential: true
`)
	code, out, stderr := xk(t, "tx", "apply", "--config", cfg, tx)
	if code != exitOK || !strings.Contains(out, "committed") || !strings.Contains(out, "b: create /log-00000000") {
		t.Fatalf("apply: exit %d\n%s\n%s", code, out, stderr)
	}
	// The same ops again fail: the nodes exist. Non-zero exit, reason named.
	code, _, stderr = xk(t, "tx", "apply", "--config", cfg, "--format", "json", tx)
	if code != exitFailure || !strings.Contains(stderr, "shard a op 0") || !strings.Contains(stderr, "node exists") {
		t.Fatalf("second apply: exit %d, %q", code, stderr)
	}
	code, out, _ = xk(t, "tx", "list", "--config", cfg, "--format", "json")
	var rows []map[string]any
	if code != exitOK || json.Unmarshal([]byte(out), &rows) != nil {
		t.Fatalf("list: exit %d, %q", code, out)
	}
	bad := writeFile(t, "bad.yaml", "shards:\n  - shard: a\n    ops:\n      - create: /x\n        set: /y\n")
	if code, _, _ := xk(t, "tx", "apply", "--config", cfg, bad); code != exitUsage {
		t.Fatalf("malformed tx file: exit %d", code)
	}
}

func TestClientVerbs(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 1})
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := c.Config.Write(cfg); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (int, string, string) {
		return xk(t, append([]string{"client", "--config", cfg, "--shard", "a"}, args...)...)
	}
	for _, step := range [][]string{{"create", "/app", "v1"}, {"create", "/app/x", ""}, {"set", "/app", "v2", "0"}} {
		if code, _, stderr := cli(step...); code != exitOK {
			t.Fatalf("%v: exit %d %s", step, code, stderr)
		}
	}
	if _, out, _ := cli("get", "/app"); out != "v2\n" {
		t.Fatalf("get: %q", out)
	}
	if _, out, _ := cli("--format", "json", "ls", "/app"); strings.TrimSpace(out) != `["x"]` {
		t.Fatalf("ls json: %q", out)
	}
	if _, out, _ := cli("stat", "/app"); !strings.Contains(out, "dataVersion = 1") || !strings.Contains(out, "numChildren = 1") {
		t.Fatalf("stat: %q", out)
	}
	if code, _, stderr := cli("set", "/app", "v3", "0"); code != exitFailure || !strings.Contains(stderr, "bad version") {
		t.Fatalf("stale version: exit %d %q", code, stderr)
	}
	if code, _, _ := cli("rmr", "/app"); code != exitOK {
		t.Fatalf("rmr: exit %d", code)
	}
	if _, out, _ := cli("exists", "/app"); out != "false\n" {
		t.Fatalf("exists after rmr: %q", out)
	}
	if code, _, _ := cli("frobnicate", "/"); code != exitUsage {
		t.Fatalf("unknown verb: exit %d", code)
	}
}

// TestPartitionUsage checks the partition commands' flag errors: exit 2,
// with the flag named, before anything is read or changed.
func TestPartitionUsage(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 1})
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := c.Config.Write(cfg); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"partition", "move", "--from", "nocolon", "--to", "s:d.t", "--partition", "1"}, "--from"},
		{[]string{"partition", "attach", "--from", "s:d.t", "--to", "s:dt", "--partition", "1"}, "--to"},
		{[]string{"partition", "move", "--from", "s:d.t", "--to", "s:d.u"}, "--partition"},
	} {
		code, _, stderr := xk(t, append(c.args, "--config", cfg)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d naming %s", c.args, code, stderr, exitUsage, c.want)
		}
	}
	// An empty cluster: audit is clean, recover has nothing to do.
	for _, args := range [][]string{{"audit"}, {"recover"}, {"recover", "--commit"}, {"partition", "moves"}} {
		if code, out, stderr := xk(t, append(args, "--config", cfg)...); code != exitOK {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, stderr)
		}
	}
}
