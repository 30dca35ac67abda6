package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/testenv"
)

// syncBuffer is a bytes.Buffer for a writer and a reader in two goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestDemo runs README's first command's code path (xkeeper demo) end to
// end: the partition is moved from ca to cb across keeper shards, the
// audit is clean, the commands it suggests work, and the stop signal
// stops every server and removes what it made.
func TestDemo(t *testing.T) {
	if testenv.ClickHouseCommand() == nil {
		if os.Getenv(testenv.RequireClickHouseEnv) == "1" {
			t.Fatal("clickhouse-server is missing (required by " + testenv.RequireClickHouseEnv + "=1)")
		}
		t.Skip("clickhouse-server is missing; install it with .ci/install-deps.sh")
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var out syncBuffer
	var (
		dir       string
		pids      []int
		keeperAt  []string
		readyDone = make(chan struct{})
	)
	done := make(chan error, 1)
	go func() {
		done <- runDemo(ctx, &out, demoOptions{Rows: 5000}, func(d *demo) error {
			defer close(readyDone)
			dir = d.Dir
			for _, name := range demoServers {
				pids = append(pids, d.Servers[name].PID())
			}
			keeperAt = d.Config.Shards[0].ClientAddrs()
			for _, name := range demoServers {
				want := "202401\t5000\n" // the destination's replicas
				if name[1] == 'a' {
					want = "202402\t1000\n" // the source's: the other month only
				}
				ch := d.Servers[name]
				if _, err := ch.Query(ctx, "SYSTEM SYNC REPLICA demo.events"); err != nil {
					return err
				}
				if got, err := ch.Query(ctx, "SELECT _partition_id, count() FROM demo.events GROUP BY _partition_id"); err != nil || got != want {
					return errors.Join(err, fmt.Errorf("%s holds %q, want %q", name, got, want))
				}
			}
			if code, _, stderr := xk(t, "audit", "--config", d.File); code != exitOK {
				return errors.New("audit: " + stderr)
			}
			if code, _, stderr := xk(t, "partition", "move", "--config", d.File, "--from", "cb1:demo.events", "--to", "ca1:demo.events", "--partition", "202401", "--dry-run"); code != exitOK {
				return errors.New("dry run: " + stderr)
			}
			return nil
		})
	}()
	select {
	case <-readyDone:
	case err := <-done:
		t.Fatalf("the demo ended early: %v\n%s", err, out.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("no demo after 3 minutes:\n%s", out.String())
	}
	stop() // Ctrl-C
	select {
	case err := <-done:
		require.NoError(t, err, out.String())
	case <-time.After(time.Minute):
		t.Fatalf("the demo did not stop:\n%s", out.String())
	}
	text := out.String()
	t.Log(text)
	for _, want := range []string{"partition 202401 rows: ca1 0, ca2 0, cb1 5000, cb2 5000", "audit… clean", "--dry-run", "removed " + dir} {
		assert.Contains(t, text, want)
	}
	_, err := os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "the demo's directory is removed")
	for _, pid := range pids {
		assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "ClickHouse %d is gone", pid)
	}
	for _, addr := range keeperAt {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		assert.Error(t, err, "keeper member at %s stopped", addr)
	}
	assert.False(t, strings.Contains(text, "level=WARN"), "member logs go to the log file, not the terminal")
}
