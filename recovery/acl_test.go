package recovery_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/xkeeper/xkeeper/config"
	"github.com/xkeeper/xkeeper/keeper/client"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/movetest"
	"github.com/xkeeper/xkeeper/recovery"
	"github.com/xkeeper/xkeeper/testenv"
	"github.com/xkeeper/xkeeper/xshard"
)

// TestAuditOpenACL: znodes of xkeeper's left open from before security.auth
// was set are no finding without it (open by design) and an open-acl
// finding with it; recover gives them the digest ACL, except a znode of
// another identity, which it reports; a mover without security.auth's
// identity gets an audit that says why it cannot read.
func TestAuditOpenACL(t *testing.T) {
	c := testenv.StartCluster(t, testenv.ClusterOptions{Shards: 2, Members: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open, secured := *c.Config, *c.Config
	secured.Security.Auth = "xkeeper:audit"
	mover := func(cfg *config.Cluster, opts ...client.Option) *movepart.Mover {
		m := movepart.New(cfg, xshard.NewRouter(cfg, testenv.TestLogger(t), opts...), movepart.Options{Log: testenv.TestLogger(t)})
		t.Cleanup(func() { m.Close(); m.Store().Router().Close() })
		return m
	}

	// Created before security.auth was set: open. And one znode of another
	// identity, whose ACL security.auth may not change.
	plain := movetest.Connect(t, c.Servers("a"))
	for _, p := range []string{movepart.Root, movepart.MovesDir, movepart.LocksDir, movepart.JournalDir} {
		_, err := plain.Create(ctx, p, nil, 0, nil)
		require.NoError(t, err, p)
	}
	someone := &config.Cluster{Security: config.Security{Auth: "someone:else"}}
	other := movetest.Connect(t, c.Servers("a"), movepart.AuthOptions(someone)...)
	foreign := movepart.Root + "/foreign"
	_, err := other.Create(ctx, foreign, nil, 0, movepart.ACL(someone))
	require.NoError(t, err)

	rep, err := recovery.Audit(ctx, mover(&open))
	require.NoError(t, err)
	assert.Empty(t, rep.Findings, "open znodes without security.auth")

	m := mover(&secured, movepart.AuthOptions(&secured)...)
	rep, err = recovery.Audit(ctx, m)
	require.NoError(t, err)
	require.Len(t, rep.Findings, 1)
	f := rep.Findings[0]
	assert.Equal(t, recovery.OpenACL, f.Kind)
	assert.Equal(t, "a", f.Shard)
	assert.Contains(t, f.Detail, "5 znodes")
	assert.Contains(t, f.Detail, movepart.Root+" (world:anyone ALL)")
	assert.Contains(t, f.Action, "1 refuse security.auth")

	out, after, err := recovery.Recover(ctx, m, recovery.Options{})
	require.NoError(t, err)
	i := slices.IndexFunc(out, func(o recovery.Outcome) bool { return o.Kind == recovery.OpenACL })
	require.GreaterOrEqual(t, i, 0)
	assert.Contains(t, out[i].Result, "on 4 znodes")
	assert.Contains(t, out[i].Err, "super digest")
	require.Len(t, after.Findings, 1)
	assert.Contains(t, after.Findings[0].Detail, "1 znodes")
	assert.Contains(t, after.Findings[0].Detail, foreign+" (refuses security.auth)")
	for _, p := range []string{movepart.Root, movepart.MovesDir, movepart.LocksDir, movepart.JournalDir} {
		_, err := plain.Set(ctx, p, []byte("x"), -1)
		assert.ErrorIs(t, err, proto.ErrNoAuth, p)
		_, err = plain.Create(ctx, p+"/intruder", nil, 0, nil)
		assert.ErrorIs(t, err, proto.ErrNoAuth, p)
	}

	// A mover without security.auth's identity can read nothing now, and
	// its audit says why rather than take the znodes for another's.
	rep, err = recovery.Audit(ctx, mover(&secured))
	require.NoError(t, err)
	require.NotEmpty(t, rep.Findings)
	for _, f := range rep.Findings {
		assert.Equal(t, recovery.Unreachable, f.Kind, f.Detail)
		assert.Contains(t, f.Detail, "security.auth")
	}

	// Its owner hands the last one over: clean.
	_, err = other.SetACL(ctx, foreign, movepart.ACL(&secured), -1)
	require.NoError(t, err)
	rep, err = recovery.Audit(ctx, m)
	require.NoError(t, err)
	assert.Empty(t, rep.Findings)
}
