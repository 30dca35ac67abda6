package objects_test

import (
	"context"
	"errors"
	"iter"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/movetest"
	"github.com/xkeeper/xkeeper/movepart/objects"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// memBucket is a bucket in memory, enough for the catalog's keeper side:
// objects put with the time they were uploaded at, listed, removed; a call
// can be held at a gate (hold) until the test releases it.
type memBucket struct {
	mu    sync.Mutex
	objs  map[string]objects.ObjectInfo
	gates map[string]*gate
}

func newMemBucket(keys ...string) *memBucket {
	b := &memBucket{objs: map[string]objects.ObjectInfo{}, gates: map[string]*gate{}}
	for _, k := range keys {
		b.put(k, time.Now())
	}
	return b
}

// put uploads key's bytes (the same each time: the same ETag) as of
// modified.
func (b *memBucket) put(key string, modified time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.objs[key] = objects.ObjectInfo{Key: key, Size: 1, Modified: modified, ETag: "etag of " + key}
}

// gate holds the next n calls of one method on one key until released.
type gate struct {
	n, left int           // calls to hold; left to come (under the bucket's lock)
	arrived chan struct{} // one value per call held
	release chan struct{}
}

// hold sets a gate for the next n calls of op ("stat", "remove", "list";
// key "" for list) on key.
func (b *memBucket) hold(op, key string, n int) *gate {
	g := &gate{n: n, left: n, arrived: make(chan struct{}, n), release: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gates[op+" "+key] = g
	return g
}

// wait waits, until a deadline, for the n calls held at g.
func (g *gate) wait(t *testing.T) {
	t.Helper()
	deadline := time.After(time.Minute)
	for range g.n {
		select {
		case <-g.arrived:
		case <-deadline:
			t.Fatal("the held call never came")
		}
	}
}

// pass holds the caller at op's gate on key, if one is set.
func (b *memBucket) pass(op, key string) {
	b.mu.Lock()
	g := b.gates[op+" "+key]
	if g != nil {
		if g.left--; g.left == 0 {
			delete(b.gates, op+" "+key)
		}
	}
	b.mu.Unlock()
	if g != nil {
		g.arrived <- struct{}{}
		<-g.release
	}
}

func (b *memBucket) Stat(_ context.Context, key string) (objects.ObjectInfo, error) {
	b.mu.Lock()
	info, ok := b.objs[key]
	b.mu.Unlock()
	defer b.pass("stat", key) // what was read, returned late: a slow caller
	if !ok {
		return info, objects.ErrUnknownObject
	}
	return info, nil
}

func (b *memBucket) Remove(_ context.Context, key, etag string) error {
	b.pass("remove", key)
	b.mu.Lock()
	defer b.mu.Unlock()
	if info, ok := b.objs[key]; ok && etag != "" && info.ETag != etag {
		return objects.ErrChanged
	}
	delete(b.objs, key)
	return nil
}

func (b *memBucket) List(_ context.Context, prefix string) iter.Seq2[objects.ObjectInfo, error] {
	b.pass("list", "")
	b.mu.Lock()
	var out []objects.ObjectInfo
	for k, info := range b.objs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, info)
		}
	}
	b.mu.Unlock()
	return func(yield func(objects.ObjectInfo, error) bool) {
		for _, info := range out {
			if !yield(info, nil) {
				return
			}
		}
	}
}

func (b *memBucket) Upload(context.Context, string, string) error {
	return errors.New("memBucket: no uploads")
}

func (b *memBucket) Download(context.Context, string, string) error {
	return errors.New("memBucket: no downloads")
}

// znodes lists dir and every znode below it on cl's shard.
func znodes(t *testing.T, cl *client.Client, dir string) []string {
	t.Helper()
	out := []string{dir}
	children, err := cl.GetChildren(ctx(t), dir)
	require.NoError(t, err, dir)
	for _, c := range children {
		out = append(out, znodes(t, cl, dir+"/"+c)...)
	}
	return out
}

// TestCatalogProtected checks, with security.auth set and no S3 server,
// that the catalog's znodes on both shards get its digest ACL, that
// clients without that identity can neither read, change, add to nor
// delete them, that a catalog whose router lacks it fails at once with
// ErrNoAuth naming security.auth, and that register, link, unlink and GC
// work with it.
func TestCatalogProtected(t *testing.T) {
	e := &env{keepers: testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 1})}
	e.configure(t, 2)
	require.NotEmpty(t, e.cfg.Security.Auth)
	bucket := newMemBucket("parts/x", "parts/y")
	c := objects.New(movetest.Router(t, e.cfg), bucket, testenv.TestLogger(t))
	t0, t1 := e.tables[0], e.tables[1] // shards a and b
	src, dst := ref(t0, "all_1_1_0", "data.bin"), ref(t1, "all_2_2_0", "data.bin")
	require.NoError(t, c.Register(ctx(t), src, "parts/x"))
	require.NoError(t, c.Link(ctx(t), src, dst))

	connect := func(shard string, opts ...client.Option) *client.Client {
		return movetest.Connect(t, e.keepers.Servers(shard), opts...)
	}
	nodes := map[string][]string{}
	for _, shard := range []string{"a", "b"} {
		authed := connect(shard, movepart.AuthOptions(e.cfg)...)
		nodes[shard] = znodes(t, authed, objects.Dir)
		// The directories, the table's and part's, the reference, and on a
		// the object's fan-out directory and znode.
		assert.GreaterOrEqual(t, len(nodes[shard]), 5, shard)
		for _, p := range nodes[shard] {
			acl, _, err := authed.GetACL(ctx(t), p)
			require.NoError(t, err, p)
			assert.Equal(t, movepart.ACL(e.cfg), acl, p)
		}
	}
	require.Equal(t, "digest", movepart.ACL(e.cfg)[0].Scheme)

	for name, opts := range map[string][]client.Option{
		"NoAuth":        nil,
		"AnotherDigest": {client.WithAuth("digest", []byte("xkeeper:guess"))},
	} {
		t.Run(name, func(t *testing.T) {
			for shard, paths := range nodes {
				cl := connect(shard, opts...)
				for _, p := range paths {
					_, _, err := cl.Get(ctx(t), p)
					assert.ErrorIs(t, err, proto.ErrNoAuth, "getData %s on %s", p, shard)
					_, err = cl.GetChildren(ctx(t), p)
					assert.ErrorIs(t, err, proto.ErrNoAuth, "getChildren %s on %s", p, shard)
					_, err = cl.Set(ctx(t), p, []byte(`{"refs":99}`), -1)
					assert.ErrorIs(t, err, proto.ErrNoAuth, "setData %s on %s", p, shard)
					_, err = cl.Create(ctx(t), p+"/intruder", nil, 0, nil)
					assert.ErrorIs(t, err, proto.ErrNoAuth, "create under %s on %s", p, shard)
					assert.ErrorIs(t, cl.Delete(ctx(t), p, -1), proto.ErrNoAuth, "delete %s on %s", p, shard)
				}
			}

			// A catalog whose router lacks security.auth fails at once, and
			// says why.
			r := xshard.NewRouter(e.cfg, testenv.TestLogger(t), opts...)
			defer r.Close()
			bad := objects.New(r, bucket, testenv.TestLogger(t))
			for what, err := range map[string]error{
				"link":     bad.Link(ctx(t), src, ref(t0, "all_3_3_0", "data.bin")),
				"register": bad.Register(ctx(t), ref(t1, "all_4_4_0", "data.bin"), "parts/y"),
				"unlink":   bad.Unlink(ctx(t), dst),
			} {
				assert.ErrorIs(t, err, movepart.ErrNoAuth, what)
				assert.ErrorContains(t, err, "security.auth", what)
			}
			_, err := bad.Audit(ctx(t))
			assert.ErrorIs(t, err, movepart.ErrNoAuth)
		})
	}

	// Nothing an intruder tried changed the catalog; with security.auth
	// the object goes when its last reference does.
	rep := clean(t, c)
	assert.Equal(t, 2, rep.References)
	require.NoError(t, c.Unlink(ctx(t), src))
	require.NoError(t, c.Unlink(ctx(t), dst))
	got, err := c.GC(ctx(t), true)
	require.NoError(t, err)
	assert.Equal(t, []string{"parts/x"}, got.Deleted)
	_, err = bucket.Stat(ctx(t), "parts/x")
	assert.ErrorIs(t, err, objects.ErrUnknownObject)
	rep = clean(t, c)
	assert.Zero(t, rep.Objects)
}
