package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const twoShardsOnNodes = `
nodes:
  - {name: n1, peer_addr: 127.0.0.1:22901, data_dir: /var/lib/xkeeper/n1}
  - {name: n2, peer_addr: 127.0.0.1:22902, data_dir: /var/lib/xkeeper/n2}
shards:
  - name: a
    members:
      - {id: a1, node: n1, client_addr: 127.0.0.1:22811}
      - {id: a2, node: n2, client_addr: 127.0.0.1:22812}
  - name: b
    members:
      - {id: b1, node: n1, client_addr: 127.0.0.1:22821, data_dir: /srv/b1}
      - {id: b2, node: n2, client_addr: 127.0.0.1:22822, raft_addr: 127.0.0.1:22902}
`

// TestMembersTakeTheirNodesPeerPort: a member placed on a node has the
// node's peer address as its raft address and a data directory under the
// node's unless it names one; Node lists what a node hosts.
func TestMembersTakeTheirNodesPeerPort(t *testing.T) {
	c := mustLoad(t, twoShardsOnNodes)
	_, a1, err := c.Member("a1")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:22901", a1.RaftAddr)
	assert.Equal(t, "/var/lib/xkeeper/n1/a1", a1.DataDir)
	_, b1, err := c.Member("b1")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:22901", b1.RaftAddr, "shared with a1")
	assert.Equal(t, "/srv/b1", b1.DataDir, "its own")

	n, ids, err := c.Node("n2")
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:22902", n.PeerAddr)
	assert.Equal(t, []string{"a2", "b2"}, ids)
	_, _, err = c.Node("n9")
	assert.EqualError(t, err, `config: no node "n9"; known nodes: n1, n2`)
}

// TestNodePlacementIsChecked: each mistake of the node form is named by
// its key.
func TestNodePlacementIsChecked(t *testing.T) {
	for name, tc := range map[string]struct{ file, want string }{
		"unknown node": {`
nodes: [{name: n1, peer_addr: 127.0.0.1:22901, data_dir: /d}]
shards: [{name: a, members: [{id: a1, node: n7, client_addr: 127.0.0.1:22811}]}]`,
			`config: shards[0].members[0].node: no node "n7"; known nodes: n1`},
		"two members of a shard on one node": {`
nodes: [{name: n1, peer_addr: 127.0.0.1:22901, data_dir: /d}]
shards: [{name: a, members: [{id: a1, node: n1, client_addr: 127.0.0.1:22811}, {id: a2, node: n1, client_addr: 127.0.0.1:22812}]}]`,
			`config: shards[0].members[1].node: node "n1" already hosts member a1 of this shard: a node hosts one member of each shard`},
		"another raft address": {`
nodes: [{name: n1, peer_addr: 127.0.0.1:22901, data_dir: /d}]
shards: [{name: a, members: [{id: a1, node: n1, client_addr: 127.0.0.1:22811, raft_addr: 127.0.0.1:22999}]}]`,
			`config: shards[0].members[0].raft_addr: "127.0.0.1:22999": a member on node n1 has the node's peer_addr "127.0.0.1:22901" as its raft address; leave it out`},
		"a member off the node on its port": {`
nodes: [{name: n1, peer_addr: 127.0.0.1:22901, data_dir: /d}]
shards: [{name: a, members: [{id: a1, client_addr: 127.0.0.1:22811, raft_addr: 127.0.0.1:22901, data_dir: /a1}]}]`,
			`config: shards[0].members[0].raft_addr: address "127.0.0.1:22901" already used by nodes[0].peer_addr`},
		"node without a peer address": {`
nodes: [{name: n1, data_dir: /d}]
shards: [{name: a, members: [{id: a1, node: n1, client_addr: 127.0.0.1:22811}]}]`,
			`config: nodes[0].peer_addr: required`},
		"a data directory twice": {`
shards: [{name: a, members: [{id: a1, client_addr: 127.0.0.1:22811, raft_addr: 127.0.0.1:22911, data_dir: /d/x},
  {id: a2, client_addr: 127.0.0.1:22812, raft_addr: 127.0.0.1:22912, data_dir: /d/x/}]}]`,
			`config: shards[0].members[1].data_dir: "/d/x" is already the data directory of shards[0].members[0].data_dir`},
		"a data directory inside another": {`
shards: [{name: a, members: [{id: a1, client_addr: 127.0.0.1:22811, raft_addr: 127.0.0.1:22911, data_dir: /d/x},
  {id: a2, client_addr: 127.0.0.1:22812, raft_addr: 127.0.0.1:22912, data_dir: /d/x/y}]}]`,
			`config: shards[0].members[1].data_dir: "/d/x/y" lies inside shards[0].members[0].data_dir "/d/x"`},
		"the node's own directory": {`
nodes: [{name: n1, peer_addr: 127.0.0.1:22901, data_dir: /d}]
shards: [{name: a, members: [{id: a1, node: n1, client_addr: 127.0.0.1:22811, data_dir: /d}]}]`,
			`config: shards[0].members[0].data_dir: "/d" is the data directory of nodes[0].data_dir: give the member its own`},
		"an id that is a path": {`
nodes: [{name: n1, peer_addr: 127.0.0.1:22901, data_dir: /d}]
shards: [{name: a, members: [{id: ../etc, node: n1, client_addr: 127.0.0.1:22811}]}]`,
			`config: shards[0].members[0].id: "../etc": use letters, digits and . _ - (not first)`},
		"repeated node name": {`
nodes: [{name: n1, peer_addr: 127.0.0.1:22901, data_dir: /d}, {name: n1, peer_addr: 127.0.0.1:22902, data_dir: /e}]
shards: [{name: a, members: [{id: a1, node: n1, client_addr: 127.0.0.1:22811}]}]`,
			`config: nodes[1].name: node name "n1" already used`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := load(t, tc.file)
			wantErr(t, err, tc.want)
		})
	}
	c := mustLoad(t, `
nodes: [{name: n1, peer_addr: 127.0.0.1:22901, data_dir: /d}]
shards: [{name: a, members: [{id: a1, client_addr: 127.0.0.1:22811, raft_addr: 127.0.0.1:22911, data_dir: /a1}]}]`)
	_, _, err := c.Node("n1")
	assert.EqualError(t, err, `config: node "n1" hosts no member: give members node: n1`)
}

// TestMountsAreChecked: the mount table names shards that exist, mount
// points that can be mounted, and a node with an endpoint hosts every
// shard the endpoint routes to.
func TestMountsAreChecked(t *testing.T) {
	c := mustLoad(t, twoShardsOnNodes+`
mounts: [{path: /clickhouse/tables/t1, shard: b}]
`)
	assert.Equal(t, "a", c.Root())
	assert.Equal(t, []string{"a", "b"}, c.EndpointShards())

	onlyA := `
nodes:
  - {name: n1, peer_addr: 127.0.0.1:22901, data_dir: /d1, client_addr: 127.0.0.1:22181}
  - {name: n2, peer_addr: 127.0.0.1:22902, data_dir: /d2}
shards:
  - {name: a, members: [{id: a1, node: n1, client_addr: 127.0.0.1:22811}]}
  - {name: b, members: [{id: b2, node: n2, client_addr: 127.0.0.1:22822}]}
`
	for name, tc := range map[string]struct{ file, want string }{
		"unknown shard": {twoShardsOnNodes + `mounts: [{path: /x, shard: q}]`,
			`config: mounts[0].shard: no shard "q"; known shards: a, b`},
		"unknown root": {twoShardsOnNodes + `root_shard: q`,
			`config: root_shard: no shard "q"; known shards: a, b`},
		"relative path": {twoShardsOnNodes + `mounts: [{path: x/y, shard: b}]`,
			`config: mounts[0].path: "x/y": want an absolute path other than /`},
		"the root": {twoShardsOnNodes + `mounts: [{path: /, shard: b}]`,
			`config: mounts[0].path: "/": want an absolute path other than /`},
		"not canonical": {twoShardsOnNodes + `mounts: [{path: /x/../y, shard: b}]`,
			`config: mounts[0].path: "/x/../y": want a canonical path: no empty, . or .. names, no trailing /`},
		"zookeeper's own": {twoShardsOnNodes + `mounts: [{path: /zookeeper/quota, shard: b}]`,
			`config: mounts[0].path: "/zookeeper/quota": /zookeeper and below stay on the root shard`},
		"twice": {twoShardsOnNodes + `mounts: [{path: /x, shard: b}, {path: /x, shard: a}]`,
			`config: mounts[1].path: mount path "/x" already used by mounts[0].path`},
		"an endpoint without a shard's member": {onlyA + `mounts: [{path: /x, shard: b}]`,
			`config: nodes[0]: the client endpoint of node n1 routes to shard b, which has no member on the node`},
		"a TLS endpoint without client_tls": {strings.Replace(onlyA, "client_addr: 127.0.0.1:22181", "secure_client_addr: 127.0.0.1:22181", 1),
			`config: nodes[0].secure_client_addr: needs security.client_tls (cert_file, key_file)`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := load(t, tc.file)
			wantErr(t, err, tc.want)
		})
	}
}
