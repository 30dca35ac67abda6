package zkimport_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/xkeeper/xkeeper/bench"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/keeper/zkimport"
	"github.com/xkeeper/xkeeper/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const identity = "importer:secret"

// connect opens a session with the importer's digest identity.
func connect(t *testing.T, servers []string) *zk.Conn {
	conn, err := bench.Connect(servers)
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	require.NoError(t, conn.AddAuth("digest", []byte(identity)))
	return conn
}

// fillZooKeeper writes a tree that exercises what an import must carry:
// nesting, sequential nodes with deletes between them (cversion is not the
// count of children), versions, ACLs, multis that succeed and fail,
// containers, TTL znodes, large data, and ephemerals of a session still
// open (to be dropped) and of one closed (deleted by ZooKeeper itself).
// It ends with writes after ZooKeeper's newest snapshot in dir.
func fillZooKeeper(t *testing.T, conn, other *zk.Conn, dir string) {
	open := zk.WorldACL(zk.PermAll)
	must := func(_ any, err error) { t.Helper(); require.NoError(t, err) }
	must(conn.Create("/app", []byte("v0"), 0, open))
	for i := range 5 {
		must(conn.Set("/app", []byte(fmt.Sprint("v", i+1)), int32(i)))
	}
	must(conn.Create("/app/queue", nil, 0, open))
	for i := range 30 {
		p, err := conn.Create("/app/queue/item-", []byte(fmt.Sprint(i)), zk.FlagSequence, open)
		require.NoError(t, err)
		if i%3 == 0 {
			require.NoError(t, conn.Delete(p, -1))
		}
	}
	must(conn.Create("/app/guarded", []byte("secret"), 0, zk.DigestACL(zk.PermAll, "importer", "secret")))
	must(conn.Create("/app/acl", nil, 0, open))
	must(conn.SetACL("/app/acl", append(zk.WorldACL(zk.PermRead), zk.DigestACL(zk.PermAll, "importer", "secret")...), 0))
	must(conn.Multi(&zk.CreateRequest{Path: "/app/multi", Data: []byte("m"), Acl: open},
		&zk.SetDataRequest{Path: "/app", Data: []byte("multi"), Version: -1}))
	_, err := conn.Multi(&zk.CreateRequest{Path: "/app/never", Acl: open},
		&zk.CheckVersionRequest{Path: "/app", Version: 999})
	require.Error(t, err)
	must(conn.CreateContainer("/app/container", nil, zk.FlagContainer, open))
	must(conn.Create("/app/container/child", nil, 0, open))
	must(conn.CreateTTL("/app/ttl", []byte("t"), zk.FlagTTL, open, time.Hour))
	must(conn.Create("/app/big", bytes.Repeat([]byte("x"), 200_000), 0, open))
	for i := range 40 { // past snapCount: a snapshot, then more log
		must(conn.Create(fmt.Sprintf("/app/n%02d", i), []byte("d"), 0, open))
		must(conn.Set(fmt.Sprintf("/app/n%02d", i), []byte("e"), 0))
	}
	must(conn.Create("/app/eph", nil, zk.FlagEphemeral, open))
	must(other.Create("/app/gone", nil, zk.FlagEphemeral, open))
	other.Close()
	writePastSnapshot(t, conn, dir)
}

// writePastSnapshot makes sure the log holds transactions after the newest
// snapshot: ZooKeeper snapshots at a random point and may name the snapshot
// after the last write. It sets a znode until a new snapshot file appears
// (its name, the zxid it covers, is fixed when the file is made), then
// three times more: fewer than snapCount/2, the least that starts another.
func writePastSnapshot(t *testing.T, conn *zk.Conn, dir string) {
	before := newest(t, dir, "snapshot")
	for i := 0; newest(t, dir, "snapshot") == before; i++ {
		require.Less(t, i, 100, "snapCount=20 makes a snapshot every 20 writes at most")
		_, err := conn.Set("/app/n00", []byte(fmt.Sprint("s", i)), -1)
		require.NoError(t, err)
	}
	for i := range 3 {
		_, err := conn.Set("/app/n01", []byte(fmt.Sprint("after", i)), -1)
		require.NoError(t, err)
	}
}

// assertImported checks the imported state against what ZooKeeper served:
// every znode but the ephemerals, with its data, ACL and stat; the parent
// of a dropped ephemeral lost that child at the state's zxid, as after the
// session's expiry.
func assertImported(t *testing.T, want map[string]testenv.ZNode, st *fsm.State, ephemerals []string) {
	t.Helper()
	lost := map[string]int{}
	for _, e := range ephemerals {
		lost[path.Dir(e)]++
	}
	count := 0
	for p, w := range want {
		n := st.Node(p)
		if slices.Contains(ephemerals, p) {
			assert.Nil(t, n, "ephemeral %s is dropped", p)
			continue
		}
		count++
		if !assert.NotNil(t, n, "%s is missing", p) {
			continue
		}
		if p != "/zookeeper/config" { // ZooKeeper's own, rewritten on start
			assert.Equal(t, string(w.Data), string(n.Data()), "%s data", p)
		}
		var acl []zk.ACL
		for _, a := range st.ACL(n) {
			acl = append(acl, zk.ACL{Perms: a.Perms, Scheme: a.Scheme, ID: a.ID.ID})
		}
		assert.Equal(t, w.ACL, acl, "%s ACL", p)
		ws := w.Stat
		if k := lost[p]; k > 0 {
			ws.NumChildren -= int32(k)
			ws.Cversion += int32(k)
			ws.Pzxid = st.Zxid()
		}
		got := n.Stat()
		assert.Equal(t, proto.Stat{Czxid: ws.Czxid, Mzxid: ws.Mzxid, Ctime: ws.Ctime, Mtime: ws.Mtime,
			Version: ws.Version, Cversion: ws.Cversion, Aversion: ws.Aversion, EphemeralOwner: ws.EphemeralOwner,
			DataLength: ws.DataLength, NumChildren: ws.NumChildren, Pzxid: ws.Pzxid}, got, "%s stat", p)
	}
	assert.Equal(t, count, st.NodeCount(), "no znode more than ZooKeeper's")
}

// TestImportFromZooKeeper imports a ZooKeeper 3.8 tree twice, through the
// client protocol while it runs and from its files once it stopped (the
// newest snapshot, then the logs after it), and compares each result
// znode by znode with what ZooKeeper served.
func TestImportFromZooKeeper(t *testing.T) {
	z := testenv.StartZooKeeperWith(t, testenv.ZooKeeperOptions{Config: "snapCount=20\nextendedTypesEnabled=true\n"})
	conn := connect(t, z.Servers())
	fillZooKeeper(t, conn, connect(t, z.Servers()), filepath.Join(z.DataDir(0), "version-2"))
	want := testenv.ReadTree(t, conn, "/")
	require.Contains(t, want, "/app/eph")
	require.NotContains(t, want, "/app/gone", "the closed session's ephemeral is gone")

	t.Run("live", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := client.Connect(ctx, z.Servers(), client.WithAuth("digest", []byte(identity)))
		require.NoError(t, err)
		defer c.Close()
		st, sum, err := zkimport.FromServer(ctx, c)
		require.NoError(t, err)
		assert.Equal(t, 1, sum.Ephemerals)
		assertImported(t, want, st, []string{"/app/eph"})
	})

	z.Stop() // conn's session still open: its ephemeral stays in the files
	st, sum, err := zkimport.FromDataDir(z.DataDir(0), z.DataDir(0), zkimport.Options{})
	require.NoError(t, err)
	t.Logf("files: %+v", sum)
	assert.Positive(t, sum.Transactions, "transactions replayed after the snapshot")
	assert.Equal(t, 1, sum.Ephemerals, "the open session's ephemeral")
	assert.Equal(t, 1, sum.TTL)
	assert.Equal(t, fsm.ContainerOwner, st.Node("/app/container").Owner, "a container stays one")
	assertImported(t, want, st, []string{"/app/eph"})

	t.Run("torn tail", func(t *testing.T) {
		dir := copyDir(t, filepath.Join(z.DataDir(0), "version-2"))
		last := newest(t, dir, "log")
		end := dataEnd(t, last)
		require.NoError(t, os.Truncate(last, end-7)) // the last record, cut
		torn, tsum, err := zkimport.FromDataDir(dir, dir, zkimport.Options{})
		require.NoError(t, err)
		assert.True(t, tsum.TornTail)
		assert.Less(t, tsum.LastZxid, sum.LastZxid, "replay stops before the cut record")
		assert.Positive(t, torn.NodeCount())
	})
	t.Run("no logs", func(t *testing.T) {
		dir := copyDir(t, filepath.Join(z.DataDir(0), "version-2"))
		logs, err := filepath.Glob(filepath.Join(dir, "log.*"))
		require.NoError(t, err)
		for _, l := range logs {
			require.NoError(t, os.Remove(l))
		}
		_, _, err = zkimport.FromDataDir(dir, dir, zkimport.Options{})
		require.ErrorIs(t, err, zkimport.ErrNoLogs, "dataLogDir forgotten: refused")
		assert.Contains(t, err.Error(), "--log-dir")
		_, asum, err := zkimport.FromDataDir(dir, dir, zkimport.Options{AllowGaps: true})
		require.NoError(t, err, "unless asked for")
		assert.Zero(t, asum.Transactions)
	})
	t.Run("log missing in the middle", func(t *testing.T) {
		dir := copyDir(t, filepath.Join(z.DataDir(0), "version-2"))
		// The newest snapshot gone, the one before it is read, and the log
		// that follows the one holding that snapshot's zxid goes missing
		// (a later one stays).
		require.NoError(t, os.Remove(newest(t, dir, "snapshot")))
		older := newest(t, dir, "snapshot")
		from := zxidOf(t, older, "snapshot")
		logs, err := filepath.Glob(filepath.Join(dir, "log.*"))
		require.NoError(t, err)
		slices.SortFunc(logs, func(a, b string) int { return cmp.Compare(zxidOf(t, a, "log"), zxidOf(t, b, "log")) })
		i := slices.IndexFunc(logs, func(l string) bool { return zxidOf(t, l, "log") > from })
		require.True(t, i >= 0 && i < len(logs)-1, "a log after the snapshot's and a later one: %v", logs)
		require.NoError(t, os.Remove(logs[i]))
		_, _, err = zkimport.FromDataDir(dir, dir, zkimport.Options{})
		var gap *zkimport.GapError
		require.ErrorAs(t, err, &gap, "a gap: refused")
		assert.GreaterOrEqual(t, gap.After, from)
		assert.Greater(t, gap.Next, gap.After+1)
		_, gsum, err := zkimport.FromDataDir(dir, dir, zkimport.Options{AllowGaps: true})
		require.NoError(t, err, "unless asked for")
		assert.Equal(t, sum.LastZxid, gsum.LastZxid, "past the gap to the last transaction")
	})
	t.Run("damaged snapshot", func(t *testing.T) {
		dir := copyDir(t, filepath.Join(z.DataDir(0), "version-2"))
		newest := newest(t, dir, "snapshot")
		b, err := os.ReadFile(newest)
		require.NoError(t, err)
		b[len(b)/2] ^= 0xff
		require.NoError(t, os.WriteFile(newest, b, 0o644))
		older, osum, err := zkimport.FromDataDir(dir, dir, zkimport.Options{})
		require.NoError(t, err, "an older snapshot and more of the log")
		assert.NotEqual(t, newest, osum.Snapshot)
		assert.Equal(t, sum.LastZxid, osum.LastZxid)
		assertImported(t, want, older, []string{"/app/eph"})
	})
}

// copyDir copies ZooKeeper's version-2 directory, to damage the copy.
func copyDir(t *testing.T, src string) string {
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644))
	}
	return dst
}

// newest returns dir's prefix.ZXID file of the highest zxid; there must be
// two at least, so that an older one exists.
func newest(t *testing.T, dir, prefix string) string {
	files, err := filepath.Glob(filepath.Join(dir, prefix+".*"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 2, "snapCount=20 makes several %s files", prefix)
	return slices.MaxFunc(files, func(a, b string) int { return cmp.Compare(zxidOf(t, a, prefix), zxidOf(t, b, prefix)) })
}

// zxidOf returns the zxid a prefix.ZXID file is named by.
func zxidOf(t *testing.T, path, prefix string) int64 {
	var z int64
	_, err := fmt.Sscanf(strings.TrimPrefix(filepath.Base(path), prefix+"."), "%x", &z)
	require.NoError(t, err)
	return z
}

// dataEnd returns where a log's records end: ZooKeeper preallocates the
// file with zeros, and every record ends with 'B'.
func dataEnd(t *testing.T, log string) int64 {
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	i := bytes.LastIndexByte(b, 'B')
	require.Positive(t, i)
	return int64(i + 1)
}
