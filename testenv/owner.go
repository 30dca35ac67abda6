package testenv

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// AssertOwnedBy asserts that dir and everything in it belong to uid and
// gid (what a restore run as root leaves for the service's user), and
// returns how many entries it saw.
func AssertOwnedBy(t testing.TB, dir string, uid, gid uint32) int {
	t.Helper()
	entries := 0
	require.NoError(t, filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		require.NoError(t, err)
		fi, err := os.Lstat(path)
		require.NoError(t, err)
		st := fi.Sys().(*syscall.Stat_t)
		assert.Equal(t, [2]uint32{uid, gid}, [2]uint32{st.Uid, st.Gid}, "owner of %s", path)
		entries++
		return nil
	}))
	return entries
}
