package movepart

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// startShards starts 2 shards (a, b) of 1 member and returns their
// cluster with security.auth set to auth ("": none), and a context for
// the test.
func startShards(t *testing.T, auth string) (*testenv.Cluster, *config.Cluster, context.Context) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 1})
	cfg := *c.Config
	cfg.Security.Auth = auth
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c, &cfg, ctx
}

// storeWith returns a store over cfg whose router sessions use opts.
func storeWith(t *testing.T, cfg *config.Cluster, opts ...client.Option) *Store {
	r := xshard.NewRouter(cfg, testenv.TestLogger(t), opts...)
	t.Cleanup(r.Close)
	return NewStore(r, testenv.TestLogger(t))
}

// TestZnodesProtected checks, with security.auth set, that every znode of
// the workflow gets its digest ACL, that a client without that identity
// (none, or another digest) can neither read nor change nor add to them,
// that a store whose router lacks it fails at once with ErrNoAuth naming
// security.auth, and that the workflow with it works.
func TestZnodesProtected(t *testing.T) {
	c, cfg, ctx := startShards(t, "xkeeper:s3cret")
	connect := func(shard string, opts ...client.Option) *client.Client {
		cl, err := client.Connect(ctx, c.Servers(shard), append(opts, client.WithLogger(testenv.TestLogger(t)))...)
		require.NoError(t, err)
		t.Cleanup(func() { cl.Close() })
		return cl
	}

	s := storeWith(t, cfg, AuthOptions(cfg)...)
	rec := testRecord("p")
	require.NoError(t, s.intent(ctx, rec))
	o, err := s.own(ctx, rec)
	require.NoError(t, err)
	record, owner := paths(rec.ID)
	lock := LocksDir + "/" + LockName(rec.Source.TableRef, rec.Partition)
	dirs := []string{Root, MovesDir, LocksDir, OwnersDir, JournalDir}
	nodes := []string{record, lock, owner}

	// base64(sha1("xkeeper:s3cret")), by openssl.
	want := []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: "xkeeper:oabGvs3WQyjEEIA3UGS0vcsiK8w="}}}
	require.Equal(t, want, s.ACL())
	authed := connect("a", AuthOptions(cfg)...)
	for _, p := range append(dirs, nodes...) {
		acl, _, err := authed.GetACL(ctx, p)
		require.NoError(t, err, p)
		assert.Equal(t, want, acl, p)
	}

	for name, opts := range map[string][]client.Option{
		"NoAuth":        nil,
		"AnotherDigest": {client.WithAuth("digest", []byte("xkeeper:guess"))},
	} {
		t.Run(name, func(t *testing.T) {
			cl := connect("a", opts...)
			for _, p := range append(dirs, nodes...) {
				_, _, err := cl.Get(ctx, p)
				assert.ErrorIs(t, err, proto.ErrNoAuth, "getData %s", p)
				_, err = cl.GetChildren(ctx, p)
				assert.ErrorIs(t, err, proto.ErrNoAuth, "getChildren %s", p)
				_, err = cl.Set(ctx, p, []byte("x"), -1)
				assert.ErrorIs(t, err, proto.ErrNoAuth, "setData %s", p)
				_, err = cl.Create(ctx, p+"/intruder", nil, 0, nil)
				assert.ErrorIs(t, err, proto.ErrNoAuth, "create under %s", p)
				_, err = cl.SetACL(ctx, p, proto.WorldACL(proto.PermAll), -1)
				assert.ErrorIs(t, err, proto.ErrNoAuth, "setACL %s", p)
			}
			for _, p := range append(dirs[1:], nodes...) {
				assert.ErrorIs(t, cl.Delete(ctx, p, -1), proto.ErrNoAuth, "delete %s", p)
			}

			// A store whose router lacks security.auth fails at once, and
			// says why.
			bad := storeWith(t, cfg, opts...)
			_, err := bad.Load(ctx, rec.ID, nil)
			assert.ErrorIs(t, err, ErrNoAuth)
			assert.ErrorContains(t, err, "security.auth")
			err = bad.intent(ctx, testRecord("q"))
			assert.ErrorIs(t, err, ErrNoAuth)
			assert.ErrorIs(t, err, proto.ErrNoAuth)
			assert.ErrorContains(t, err, "security.auth")
			assert.NoError(t, ctx.Err(), "intent retried NoAuth until the context ended")
		})
	}

	// The workflow with security.auth: records advance, the owner goes,
	// the finish deletes records and locks and writes the journal.
	rec.Step = StepStaged
	require.NoError(t, s.save(ctx, rec, "staged"))
	require.NoError(t, s.check(ctx, o))
	s.release(ctx, o)
	_, _, found, err := s.Get(ctx, "a", owner)
	require.NoError(t, err)
	assert.False(t, found, "owner znode left after release")
	require.NoError(t, s.finish(ctx, rec, true, time.Now()))
	moves, err := s.Moves(ctx)
	require.NoError(t, err)
	assert.Empty(t, moves)
	for _, shard := range []string{"a", "b"} {
		locks, err := s.Locks(ctx, shard)
		require.NoError(t, err)
		assert.Empty(t, locks, shard)
		entries, err := s.Journal(ctx, shard)
		require.NoError(t, err)
		require.Len(t, entries, 1, shard)
		acl, _, err := connect(shard, AuthOptions(cfg)...).GetACL(ctx, JournalDir+"/"+journalName(rec))
		require.NoError(t, err)
		assert.Equal(t, want, acl)
	}
}

// TestZnodesOpenWithoutAuth: without security.auth the znodes stay open to
// every client, as before it existed.
func TestZnodesOpenWithoutAuth(t *testing.T) {
	c, cfg, ctx := startShards(t, "")
	s := storeWith(t, cfg)
	assert.False(t, s.Protected())
	assert.Empty(t, AuthOptions(cfg))
	rec := testRecord("p")
	require.NoError(t, s.intent(ctx, rec))
	cl, err := client.Connect(ctx, c.Servers("b"))
	require.NoError(t, err)
	defer cl.Close()
	record, _ := paths(rec.ID)
	acl, _, err := cl.GetACL(ctx, record)
	require.NoError(t, err)
	assert.Equal(t, proto.WorldACL(proto.PermAll), acl)
}
