package zkimport_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/zkimport"
	"github.com/xkeeper/xkeeper/testenv"
)

// TestImportGzipSnapshots: a ZooKeeper 3.8 told to compress its snapshots
// (zookeeper.snapshot.compression.method=gz, set from zoo.cfg) writes
// snapshot.ZXID.gz files only; the import reads the newest of them and
// replays the logs after it into the tree ZooKeeper served (README,
// Migrating from ZooKeeper: "gzip-compressed ones too").
func TestImportGzipSnapshots(t *testing.T) {
	z := testenv.StartZooKeeperWith(t, testenv.ZooKeeperOptions{
		Config: "snapCount=20\nextendedTypesEnabled=true\nsnapshot.compression.method=gz\n"})
	conn := connect(t, z.Servers())
	dir := filepath.Join(z.DataDir(0), "version-2")
	fillZooKeeper(t, conn, connect(t, z.Servers()), dir)
	want := testenv.ReadTree(t, conn, "/")
	z.Stop()

	snaps, err := filepath.Glob(filepath.Join(dir, "snapshot.*"))
	require.NoError(t, err)
	require.NotEmpty(t, snaps)
	for _, s := range snaps {
		require.True(t, strings.HasSuffix(s, ".gz"), "ZooKeeper wrote %s uncompressed: the test would not read a gzip snapshot", s)
	}
	st, sum, err := zkimport.FromDataDir(z.DataDir(0), z.DataDir(0), zkimport.Options{})
	require.NoError(t, err)
	assert.Equal(t, newest(t, dir, "snapshot"), sum.Snapshot, "the newest snapshot, gzipped, is the one read")
	assert.Positive(t, sum.Transactions, "transactions replayed after the snapshot")
	assertImported(t, want, st, []string{"/app/eph"})
}
