package objects_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/movetest"
	"github.com/xkeeper/xkeeper/movepart/objects"
	"github.com/xkeeper/xkeeper/testenv"
)

// race is a catalog on two shards over a bucket in memory, seen by a
// registrar whose clock is behind (it takes any upload for a fresh one)
// and by GCs whose clock is ahead (any upload is past the grace period).
type race struct {
	e       *env
	b       *memBucket
	reg, gc *objects.Catalog
	another func() *objects.Catalog // a second GC, its clock as far ahead
}

func startRace(t *testing.T) *race {
	e := &env{keepers: testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 1})}
	e.configure(t, 2)
	rc := &race{e: e, b: newMemBucket()}
	open := func(grace time.Duration) *objects.Catalog {
		c := *e.cfg
		c.S3.OrphanGrace = grace
		return objects.New(movetest.Router(t, &c), rc.b, testenv.TestLogger(t))
	}
	rc.reg, rc.gc = open(24*time.Hour), open(time.Millisecond)
	rc.another = func() *objects.Catalog { return open(time.Millisecond) }
	return rc
}

// old is an upload time past the GC's grace period, within the registrar's.
func old() time.Time { return time.Now().Add(-time.Hour) }

// async runs f in a goroutine; the channel gives its error.
func async(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func (rc *race) collect(t *testing.T, c *objects.Catalog) <-chan error {
	return async(func() error { _, err := c.GC(ctx(t), true); return err })
}

// done waits, until a deadline, for an async call's error.
func done(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the call never ended")
		return nil
	}
}

// keepsBytes asserts that every live object has its bytes in the bucket
// and one home, and that the audit finds nothing.
func (rc *race) keepsBytes(t *testing.T) {
	t.Helper()
	objs, err := rc.reg.Objects(ctx(t))
	require.NoError(t, err)
	homes := map[string][]string{}
	for _, o := range objs {
		if o.State != objects.Live {
			continue
		}
		homes[o.Key] = append(homes[o.Key], o.Home)
		_, err := rc.b.Stat(ctx(t), o.Key)
		assert.NoError(t, err, "%s is referenced (%d) and gone from the bucket", o.Key, o.Refs)
	}
	for key, h := range homes {
		assert.Len(t, h, 1, "%s has homes %v", key, h)
	}
	rep, err := rc.reg.Audit(ctx(t))
	require.NoError(t, err)
	assert.Empty(t, rep.Findings)
}

// refused asserts that a registration was refused because GC took the
// key, and that the bytes uploaded again under a new key register.
func (rc *race) refused(t *testing.T, err error, r objects.Ref) {
	t.Helper()
	if err == nil {
		return // registered first: GC must have left the bytes alone
	}
	t.Logf("refused: %v", err)
	require.ErrorIs(t, err, objects.ErrDeletable)
	assert.ErrorContains(t, err, "new key")
	rc.b.put("parts/new/"+r.Part, time.Now())
	require.NoError(t, rc.reg.Register(ctx(t), r, "parts/new/"+r.Part))
}

// pausedGC runs a GC until it is held at g, then upload (if any) and a
// registration of key for r, then lets the GC end: no referenced object
// may have lost its bytes.
func (rc *race) pausedGC(t *testing.T, g *gate, r objects.Ref, key string, upload func()) {
	t.Helper()
	gc := rc.collect(t, rc.gc)
	g.wait(t)
	if upload != nil {
		upload()
	}
	err := rc.reg.Register(ctx(t), r, key)
	close(g.release)
	assert.NoError(t, done(t, gc))
	rc.refused(t, err, r)
	rc.keepsBytes(t)
}

// TestGCNeverDeletesReferencedBytes pauses GC and registration at each
// step, with the registrar's clock more than the grace period behind the
// GC's, and uploads again, collects again and registers on a second home
// in the pause: no referenced object ever loses its bytes.
func TestGCNeverDeletesReferencedBytes(t *testing.T) {
	rc := startRace(t)
	t0, t1 := rc.e.tables[0], rc.e.tables[1] // shards a and b

	t.Run("GCPausedAtList", func(t *testing.T) {
		// The shards read, the bucket not yet listed.
		rc.b.put("parts/list", old())
		rc.pausedGC(t, rc.b.hold("list", "", 1), ref(t0, "list", "f"), "parts/list", nil)
	})
	t.Run("GCPausedAtDelete", func(t *testing.T) {
		// Checked unregistered, not yet deleted.
		rc.b.put("parts/orphan", old())
		rc.pausedGC(t, rc.b.hold("remove", "parts/orphan", 1), ref(t0, "orphan", "f"), "parts/orphan", nil)
	})
	t.Run("SlowRegistration", func(t *testing.T) {
		rc.b.put("parts/slow", old())
		g := rc.b.hold("stat", "parts/slow", 1)
		reg := async(func() error { return rc.reg.Register(ctx(t), ref(t1, "slow", "f"), "parts/slow") })
		g.wait(t) // the upload seen young, not yet registered
		assert.NoError(t, done(t, rc.collect(t, rc.gc)))
		close(g.release)
		rc.refused(t, done(t, reg), ref(t1, "slow", "f"))
		rc.keepsBytes(t)
	})
	t.Run("ReuploadAfterTooOld", func(t *testing.T) {
		rc.b.put("parts/again", old())
		require.ErrorIs(t, rc.gc.Register(ctx(t), ref(t0, "again", "f"), "parts/again"), objects.ErrTooOld)
		rc.pausedGC(t, rc.b.hold("remove", "parts/again", 1), ref(t0, "again", "f"), "parts/again",
			func() { rc.b.put("parts/again", time.Now()) }) // "upload it again"
	})
	t.Run("SecondGC", func(t *testing.T) {
		// A deletable object: one GC pauses before its delete, a second
		// collects it whole, the key is uploaded and registered again.
		rc.b.put("parts/twice", time.Now())
		require.NoError(t, rc.reg.Register(ctx(t), ref(t1, "twice", "f"), "parts/twice"))
		require.NoError(t, rc.reg.Unlink(ctx(t), ref(t1, "twice", "f")))
		g := rc.b.hold("remove", "parts/twice", 1)
		stale := rc.collect(t, rc.gc)
		g.wait(t)
		assert.NoError(t, done(t, rc.collect(t, rc.another())))
		rc.b.put("parts/twice", time.Now())
		err := rc.reg.Register(ctx(t), ref(t1, "twice2", "f"), "parts/twice")
		close(g.release)
		assert.NoError(t, done(t, stale))
		rc.refused(t, err, ref(t1, "twice2", "f"))
		rc.keepsBytes(t)
	})
	t.Run("SecondHome", func(t *testing.T) {
		// Two registrations of one key from tables on two shards, both
		// past their reads of the bucket before either commits.
		for i := range 10 {
			key := fmt.Sprintf("parts/home/%d", i)
			rc.b.put(key, time.Now())
			g := rc.b.hold("stat", key, 2)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for j, table := range []int{0, 1} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[j] = rc.reg.Register(ctx(t), ref(rc.e.tables[table], "home", key), key)
				}()
			}
			g.wait(t)
			close(g.release)
			wg.Wait()
			won := 0
			for _, err := range errs {
				if err == nil {
					won++
				} else {
					assert.ErrorIs(t, err, objects.ErrExists)
				}
			}
			assert.Equal(t, 1, won, "%s registered %d times: %v", key, won, errs)
			// Two homes: one table gives up its reference; GC must leave
			// the bytes the other still needs.
			if errs[0] == nil && errs[1] == nil {
				require.NoError(t, rc.reg.Unlink(ctx(t), ref(t0, "home", key)))
			}
		}
		assert.NoError(t, done(t, rc.collect(t, rc.gc)))
		rc.keepsBytes(t)
	})
}

// abandon leaves on table's shard the record of an export of partition
// "all" whose process died after uploading key, as Export leaves it.
func (rc *race) abandon(t *testing.T, table movepart.TableRef, id, key string) {
	sh, err := rc.e.cfg.TableShard(table.Server, table.Database, table.Table)
	require.NoError(t, err)
	cl := movetest.Connect(t, rc.e.keepers.Servers(sh.Name), movepart.AuthOptions(rc.e.cfg)...)
	for _, dir := range []string{movepart.Root, objects.Dir, objects.ExportsDir} {
		if _, err := cl.Create(ctx(t), dir, nil, 0, movepart.ACL(rc.e.cfg)); !errors.Is(err, proto.ErrNodeExists) {
			require.NoError(t, err)
		}
	}
	rec := fmt.Sprintf(`{"id":%q,"table":{"server":%q,"database":%q,"table":%q},"partition":"all","step":"uploaded",`+
		`"shadow":"/var/lib/clickhouse/shadow/7/data/db/t0","files":[{"part":"all_1_1_0","file":"data.bin","key":%q}]}`,
		id, table.Server, table.Database, table.Table, key)
	name := table.Server + ":" + table.Database + "." + table.Table + "@all"
	_, err = cl.Create(ctx(t), objects.ExportsDir+"/"+name, []byte(rec), 0, movepart.ACL(rc.e.cfg))
	require.NoError(t, err)
}

// TestAbandonedExport finds an export whose process died after its
// uploads: the audit lists it, AbortExport ends it (naming its frozen
// copy), and GC then collects its uploads.
func TestAbandonedExport(t *testing.T) {
	rc := startRace(t)
	t0 := rc.e.tables[0]
	const key = "parts/exports/e1/all_1_1_0/data.bin"
	rc.b.put(key, old())
	rc.abandon(t, t0, "e1", key)

	got, err := rc.gc.GC(ctx(t), true)
	require.NoError(t, err)
	assert.Empty(t, got.Orphans, "an export's uploads are not orphans while its record is there")
	rep, err := rc.gc.Audit(ctx(t))
	require.NoError(t, err)
	require.Len(t, rep.Findings, 1)
	assert.Equal(t, objects.AbandonedExport, rep.Findings[0].Kind)
	assert.Contains(t, rep.Findings[0].Detail, "abort")

	info, err := rc.gc.AbortExport(ctx(t), t0, "all")
	require.NoError(t, err)
	assert.Equal(t, "e1", info.ID)
	assert.Equal(t, "/var/lib/clickhouse/shadow/7/data/db/t0", info.Shadow)
	exports, err := rc.gc.Exports(ctx(t))
	require.NoError(t, err)
	assert.Empty(t, exports)
	_, err = rc.gc.AbortExport(ctx(t), t0, "all")
	assert.ErrorIs(t, err, objects.ErrNoReference, "aborted again")

	got, err = rc.gc.GC(ctx(t), true)
	require.NoError(t, err)
	assert.Equal(t, []string{key}, got.Orphans)
	_, err = rc.b.Stat(ctx(t), key)
	assert.ErrorIs(t, err, objects.ErrUnknownObject)
	clean(t, rc.gc)
}
