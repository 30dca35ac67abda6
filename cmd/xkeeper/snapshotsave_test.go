package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/testenv"
)

// dirFiles returns the names of the files in dir.
func dirFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestBackupFileIsRenamedOnlyWhenComplete: README's "The file (written
// beside BACKUP and renamed over it once complete)", for writeFileAtomic,
// which `snapshot save` and `import zookeeper` write through. While the
// backup is being written, BACKUP still holds what it held (or does not
// exist) and the bytes go to one file beside it; a save that fails leaves
// BACKUP as it was and nothing beside it; one that succeeds replaces it.
func TestBackupFileIsRenamedOnlyWhenComplete(t *testing.T) {
	for _, existing := range []bool{true, false} {
		dir := t.TempDir()
		target := filepath.Join(dir, "a.xkbackup")
		if existing {
			require.NoError(t, os.WriteFile(target, []byte("the previous backup"), 0o644))
		}
		unchanged := func(when string) {
			t.Helper()
			got, err := os.ReadFile(target)
			if existing {
				require.NoError(t, err, when)
				assert.Equal(t, "the previous backup", string(got), when)
			} else {
				assert.ErrorIs(t, err, os.ErrNotExist, "%s: %q", when, got)
			}
		}
		cut := errors.New("cut off")
		_, err := writeFileAtomic(target, func(w io.Writer) error {
			_, err := io.WriteString(w, "half a backup")
			require.NoError(t, err)
			unchanged("while writing")
			var beside []string
			for _, name := range dirFiles(t, dir) {
				if name != filepath.Base(target) {
					beside = append(beside, name)
				}
			}
			require.Len(t, beside, 1, "the backup is written to one file beside its target")
			got, err := os.ReadFile(filepath.Join(dir, beside[0]))
			require.NoError(t, err)
			assert.Equal(t, "half a backup", string(got))
			return cut
		})
		require.ErrorIs(t, err, cut)
		unchanged("after a failed save")
		want := []string(nil)
		if existing {
			want = []string{filepath.Base(target)}
		}
		assert.Equal(t, want, dirFiles(t, dir), "a failed save leaves nothing beside its target")

		size, err := writeFileAtomic(target, func(w io.Writer) error {
			_, err := io.WriteString(w, "the new backup")
			return err
		})
		require.NoError(t, err)
		assert.Equal(t, int64(len("the new backup")), size)
		got, err := os.ReadFile(target)
		require.NoError(t, err)
		assert.Equal(t, "the new backup", string(got))
		assert.Equal(t, []string{filepath.Base(target)}, dirFiles(t, dir))
	}
}

// TestSnapshotSaveKilledKeepsTheTarget: `xkeeper snapshot save` over an
// existing backup, killed (SIGKILL) while the save is under way (the
// shard's member holds the barrier the save waits for), leaves the old
// backup whole under its name and its own file beside it; the next save
// replaces the old backup with a complete one.
func TestSnapshotSaveKilledKeepsTheTarget(t *testing.T) {
	bin := testenv.XkeeperBinary(t)
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 1, Members: 1})
	cfg := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, c.Config.Write(cfg))
	code, _, stderr := xk(t, "client", "--config", cfg, "--shard", "a", "create", "/kept", "v1")
	require.Equal(t, exitOK, code, stderr)
	dir := t.TempDir()
	target := filepath.Join(dir, "a.xkbackup")
	require.NoError(t, os.WriteFile(target, []byte("the previous backup"), 0o644))

	// Hold the member's state: the save's barrier cannot apply.
	held, done := make(chan struct{}), make(chan struct{})
	go c.Member(c.WaitLeader("a")).Replica.View(func(*fsm.State) {
		close(held)
		<-done
	})
	<-held
	released := false
	release := func() {
		if !released {
			released = true
			close(done)
		}
	}
	defer release()

	save := exec.Command(bin, "snapshot", "save", "--config", cfg, "--shard", "a", target)
	save.Stderr = io.Discard
	require.NoError(t, save.Start())
	exited := make(chan error, 1)
	go func() { exited <- save.Wait() }()
	var part string
	var early error
	gone := false
	clobbered := "" // what the target held once it no longer held the old backup
	require.Eventually(t, func() bool {
		select {
		case early = <-exited:
			gone = true
			return true
		default:
		}
		if got, err := os.ReadFile(target); err != nil || string(got) != "the previous backup" {
			clobbered = fmt.Sprintf("%q, %v", got, err)
			return true
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return false
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), filepath.Base(target)+".") {
				part = e.Name()
			}
		}
		return part != ""
	}, 30*time.Second, 10*time.Millisecond, "the save opens its file beside the target")
	require.False(t, gone, "snapshot save exited before it was killed: %v", early)
	require.Empty(t, clobbered, "the old backup was overwritten while the save was under way")
	require.NoError(t, save.Process.Kill())
	<-exited
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "the previous backup", string(got), "a killed save leaves the old backup whole")
	assert.FileExists(t, filepath.Join(dir, part))

	release()
	code, _, stderr = xk(t, "snapshot", "save", "--config", cfg, "--shard", "a", target)
	require.Equal(t, exitOK, code, stderr)
	code, out, stderr := xk(t, "snapshot", "status", target, "--format", "json")
	require.Equal(t, exitOK, code, "the target now holds a complete backup: %s", stderr)
	var status backupStatus
	require.NoError(t, json.Unmarshal([]byte(out), &status))
	assert.Equal(t, "a", status.Header.Shard)
	assert.GreaterOrEqual(t, status.Znodes, 2, "/ and /kept at least")
}
