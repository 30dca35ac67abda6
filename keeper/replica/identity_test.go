package replica

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEmptyDirectoryStartsOnlyWhenTold: a member whose data directory
// holds nothing (new, or wiped) is refused unless told to bootstrap or to
// join, and the refusal writes nothing, so the directory stays empty.
func TestEmptyDirectoryStartsOnlyWhenTold(t *testing.T) {
	m := newSoloMember(t)
	_, err := m.openWith(func(c *Config) { c.Bootstrap = false })
	require.ErrorIs(t, err, ErrEmptyDataDir)
	empty, err := Empty(m.dir)
	require.NoError(t, err)
	assert.True(t, empty, "the refusal left something in the directory")

	r := m.mustOpen(LogStoreWAL)
	require.NoError(t, r.Close())
	r, err = m.openWith(func(c *Config) { c.Bootstrap = false }) // it holds a member now
	require.NoError(t, err)
	require.NoError(t, r.Close())
}

// TestEveryBootstrapIsANewIncarnation: two shards bootstrapped with the
// same name and members, as a shard wiped and started again, have two
// random identities; a member keeps its own across restarts.
func TestEveryBootstrapIsANewIncarnation(t *testing.T) {
	a, b := newSoloMember(t), newSoloMember(t)
	b.peer = a.peer // the same member, the same address: only the incarnation differs
	ra := a.mustOpen(LogStoreWAL)
	first := ra.identity
	require.NoError(t, ra.Close())
	rb := b.mustOpen(LogStoreWAL)
	assert.True(t, ValidIdentity(first) && ValidIdentity(rb.identity))
	assert.NotEqual(t, first, rb.identity, "a shard started anew took the old one's identity")
	require.NoError(t, rb.Close())

	ra = a.mustOpen(LogStoreWAL)
	assert.Equal(t, first, ra.identity, "a restart keeps the identity")
}

// TestDirectoryFromBeforeIdentitiesKeepsTheDerivedOne: a data directory
// with raft state and no identity file (made before identities) is given
// the identity its shard's members derived then, and starts without
// Bootstrap.
func TestDirectoryFromBeforeIdentitiesKeepsTheDerivedOne(t *testing.T) {
	m := newSoloMember(t)
	require.NoError(t, m.mustOpen(LogStoreWAL).Close())
	require.NoError(t, os.Remove(filepath.Join(m.dir, identityFile)))
	r, err := m.openWith(func(c *Config) { c.Bootstrap = false })
	require.NoError(t, err)
	assert.Equal(t, legacyIdentity("", []Peer{m.peer}), r.identity)
}

// TestBootstrapMark: the mark is taken only by an empty directory, asks
// for a bootstrap, and is gone once the member holds an identity.
func TestBootstrapMark(t *testing.T) {
	m := newSoloMember(t)
	require.NoError(t, MarkBootstrap(m.dir))
	marked, err := BootstrapMarked(m.dir)
	require.NoError(t, err)
	assert.True(t, marked)
	m.mustOpen(LogStoreWAL)
	assert.NoFileExists(t, filepath.Join(m.dir, bootstrapMarker))
	require.ErrorIs(t, MarkBootstrap(m.dir), ErrNotEmpty)
}

// TestAdoptable: the member that bootstrapped a shard hands its identity
// to the other voters of its configuration, not to a stranger, itself, or
// a member it has heard from or handed it to before (one that was in the
// shard already), nor to any once another member has led the shard.
func TestAdoptable(t *testing.T) {
	m := newSoloMember(t)
	others := []Peer{{ID: "m2", RaftAddr: freeAddr(t)}, {ID: "m3", RaftAddr: freeAddr(t)}, {ID: "m4", RaftAddr: freeAddr(t)}}
	r, err := m.openWith(func(c *Config) { c.Peers = append(c.Peers, others...) })
	require.NoError(t, err)
	assert.True(t, r.Adoptable("m2"))
	assert.False(t, r.Adoptable("m1"), "itself")
	assert.False(t, r.Adoptable("m9"), "not in its configuration")
	r.trans.contacts.heard("m2")
	assert.False(t, r.Adoptable("m2"), "a member it heard from was in the shard already")
	require.True(t, r.HandIdentity("m3"))
	assert.False(t, r.HandIdentity("m3"), "a member it handed the identity to was in the shard already")
	assert.True(t, r.Adoptable("m4"))
	r.adoption.noteLeader("m1")(&raft.Observation{Data: raft.LeaderObservation{LeaderID: "m2"}})
	assert.False(t, r.Adoptable("m4"), "a member may have followed another leader")
	require.NoError(t, r.Close())

	restarted, err := m.openWith(func(c *Config) { c.Peers = append(c.Peers, others...) })
	require.NoError(t, err)
	assert.False(t, restarted.Adoptable("m2"), "only the start that bootstrapped hands the identity")
}
