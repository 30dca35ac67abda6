package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/objects"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
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

// TestS3Commands drives the object catalog's commands against a real S3
// gateway: link, audit, unlink, gc, and the bucket part of xkeeper audit.
func TestS3Commands(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 1})
	s3 := testenv.StartS3(t)
	cfg := *c.Config
	cfg.S3 = s3.Config
	cfg.ClickHouse.Servers = []config.ClickHouseServer{{Name: "ch", Address: "127.0.0.1:1"}}
	cfg.Tables = []config.Table{{Server: "ch", Database: "db", Shard: "a"}, {Server: "ch", Database: "db2", Shard: "b"}}
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := cfg.Write(path); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s3.Client().PutObject(ctx, s3.Config.Bucket, "parts/x", strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	r := xshard.NewRouter(&cfg, nil)
	defer r.Close()
	b, err := objects.OpenS3(ctx, cfg.S3)
	require.NoError(t, err)
	src := objects.Ref{Table: movepart.TableRef{Server: "ch", Database: "db", Table: "t"}, Part: "all_1_1_0", File: "data.bin"}
	if err := objects.New(r, b, nil).Register(ctx, src, "parts/x"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"data.bin", "data.mrk"} {
		key := "parts/p/" + f
		if _, err := s3.Client().PutObject(ctx, s3.Config.Bucket, key, strings.NewReader("p"), 1, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		p := objects.Ref{Table: src.Table, Part: "202401_3_3_0", File: f}
		if err := objects.New(r, b, nil).Register(ctx, p, key); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"partition", "move", "--zero-copy", "--from", "ch:db.t", "--to", "ch:db2.v", "--partition", "202401"}, exitOK, "2 part files"},
		{[]string{"s3", "ls", "ch:db2.v"}, exitOK, "202401_3_3_0  data.mrk  parts/p/data.mrk  b"},
		{[]string{"s3", "ls"}, exitOK, "parts/p/data.bin  1     live   b"},
		{[]string{"s3", "unlink", "ch:db2.v/202401_3_3_0/data.bin"}, exitOK, "unlinked"},
		{[]string{"s3", "unlink", "ch:db2.v/202401_3_3_0/data.mrk"}, exitOK, "unlinked"},
		{[]string{"s3", "link", "ch:db.t/all_1_1_0/data.bin", "ch:db2.u/all_2_2_0/data.bin"}, exitOK, "linked"},
		{[]string{"s3", "link", "ch:db.t/all_1_1_0", "ch:db2.u/all_2_2_0/data.bin"}, exitUsage, "SERVER:DB.TABLE/PART/FILE"},
		{[]string{"s3", "audit"}, exitOK, "3 objects, 2 references, 3 objects in the bucket, 2 deletable"},
		// The bucket agrees with the catalog; the made-up ClickHouse server is down.
		{[]string{"audit"}, exitFindings, "audit found 1 problems"},
		{[]string{"s3", "unlink", "ch:db.t/all_1_1_0/data.bin"}, exitOK, "unlinked"},
		{[]string{"s3", "unlink", "ch:db2.u/all_2_2_0/data.bin"}, exitOK, "unlinked"},
		{[]string{"s3", "unlink", "ch:db2.u/all_2_2_0/data.bin"}, exitFailure, "no such reference"},
		{[]string{"s3", "gc"}, exitOK, "3 deletable, 0 orphans"},
		{[]string{"s3", "gc", "--commit"}, exitOK, "deleted parts/x"},
		{[]string{"s3", "audit"}, exitOK, "0 objects, 0 references, 0 objects in the bucket"},
	} {
		code, out, stderr := xk(t, append(step.args, "--config", path)...)
		if code != step.code || !strings.Contains(out+stderr, step.want) {
			t.Errorf("%v: exit %d, want %d with %q\n%s%s", step.args, code, step.code, step.want, out, stderr)
		}
	}
}
