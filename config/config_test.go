package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const twoShards = `
shards:
  - name: a
    members:
      - {id: a1, client_addr: 127.0.0.1:21811, raft_addr: 127.0.0.1:21911, data_dir: /var/lib/xkeeper/a1}
      - {id: a2, client_addr: 127.0.0.1:21812, raft_addr: 127.0.0.1:21912, data_dir: /var/lib/xkeeper/a2}
  - name: b
    members:
      - {id: b1, client_addr: 127.0.0.1:21821, raft_addr: 127.0.0.1:21921, data_dir: /var/lib/xkeeper/b1}
`

func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func load(t *testing.T, text string) (*Cluster, error) {
	t.Helper()
	return Load(writeFile(t, text))
}

func mustLoad(t *testing.T, text string) *Cluster {
	t.Helper()
	c, err := load(t, text)
	require.NoError(t, err, "Load")
	return c
}

// wantErr fails unless err has a line equal to line.
func wantErr(t *testing.T, err error, line string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %q", line)
	}
	for _, got := range strings.Split(err.Error(), "\n") {
		if got == line {
			return
		}
	}
	t.Fatalf("got error\n%v\nwant a line\n%s", err, line)
}

// wantErrPrefix fails unless err has a line starting with prefix.
func wantErrPrefix(t *testing.T, err error, prefix string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %q...", prefix)
	}
	for _, got := range strings.Split(err.Error(), "\n") {
		if strings.HasPrefix(got, prefix) {
			return
		}
	}
	t.Fatalf("got error\n%v\nwant a line starting\n%s", err, prefix)
}

func TestLoadAppliesDefaults(t *testing.T) {
	withTick := Default()
	withTick.Tick = time.Second
	withTick.Fsync = false
	tests := []struct {
		name   string
		keeper string
		want   Keeper
	}{
		{"no keeper section", "", Default()},
		{"empty keeper section", "keeper: {}\n", Default()},
		{"null keeper section", "keeper:\n", Default()},
		{"some keeper keys", "keeper:\n  tick: 1s\n  fsync: false\n", withTick},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, twoShards+tt.keeper)
			if c.Keeper != tt.want {
				t.Errorf("keeper = %+v, want %+v", c.Keeper, tt.want)
			}
			if len(c.Shards) != 2 || c.Shards[1].Name != "b" {
				t.Fatalf("shards = %+v", c.Shards)
			}
			want := Member{ID: "a2", ClientAddr: "127.0.0.1:21812", RaftAddr: "127.0.0.1:21912", DataDir: "/var/lib/xkeeper/a2"}
			if got := c.Shards[0].Members[1]; got != want {
				t.Errorf("shards[0].members[1] = %+v, want %+v", got, want)
			}
		})
	}
}

func TestEnvOverridesKeeperKeys(t *testing.T) {
	tests := []struct {
		name   string
		keeper string // keeper section of the file
		env    map[string]string
		check  func(Keeper) bool
	}{
		{"tick only in env", "", map[string]string{"XKEEPER_KEEPER_TICK": "500ms"},
			func(k Keeper) bool { return k.Tick == 500*time.Millisecond }},
		{"fsync only in env", "", map[string]string{"XKEEPER_KEEPER_FSYNC": "false"},
			func(k Keeper) bool { return !k.Fsync }},
		{"env beats file", "keeper:\n  tick: 3s\n  fsync: true\n",
			map[string]string{"XKEEPER_KEEPER_TICK": "250ms", "XKEEPER_KEEPER_FSYNC": "false"},
			func(k Keeper) bool { return k.Tick == 250*time.Millisecond && !k.Fsync }},
		{"int key in env", "", map[string]string{"XKEEPER_KEEPER_MAX_BATCH_REQUESTS": "7"},
			func(k Keeper) bool { return k.MaxBatchRequests == 7 }},
		{"availability zone per process", "keeper:\n  availability_zone: eu-1a\n",
			map[string]string{"XKEEPER_KEEPER_AVAILABILITY_ZONE": "eu-1b"},
			func(k Keeper) bool { return k.AvailabilityZone == "eu-1b" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c := mustLoad(t, twoShards+tt.keeper)
			if !tt.check(c.Keeper) {
				t.Errorf("keeper = %+v does not show env %v", c.Keeper, tt.env)
			}
		})
	}
}

func TestEnvValueIsChecked(t *testing.T) {
	t.Setenv("XKEEPER_KEEPER_TICK", "soon")
	_, err := load(t, twoShards)
	wantErr(t, err, `config: keeper.tick: time: invalid duration "soon"`)
}

func TestUnknownKeysRefused(t *testing.T) {
	tests := []struct {
		name, text, key string
	}{
		{"top level", twoShards + "shard: x\n", "shard"},
		{"keeper", twoShards + "keeper:\n  tik: 1s\n", "keeper.tik"},
		{"shard", `
shards:
  - name: a
    nmae: b
    members:
      - {id: a1, client_addr: h:1, raft_addr: h:2, data_dir: /d}
`, "shards[0].nmae"},
		{"member", `
shards:
  - name: a
    members:
      - {id: a1, client_addr: h:1, raft_addr: h:2, data_dir: /d}
      - {id: a2, clinet_addr: h:3, raft_addr: h:4, data_dir: /d}
`, "shards[0].members[1].clinet_addr"},
		{"section not known", twoShards + "etcd: {endpoints: e}\n", "etcd"},
		// Viper itself drops keys whose value is null or an empty map.
		{"null value", twoShards + "etcd:\n", "etcd"},
		{"empty map", twoShards + "keeper:\n  tik: {}\n", "keeper.tik"},
		{"null in keeper", twoShards + "keeper:\n  tik:\n", "keeper.tik"},
		{"number key", twoShards + "keeper:\n  1: x\n", "keeper.1"},
		{"clickhouse section", twoShards + "clickhouse:\n  srvers: []\n", "clickhouse.srvers"},
		{"clickhouse server", twoShards + "clickhouse:\n  servers:\n    - {name: x, adress: h:1}\n", "clickhouse.servers[0].adress"},
		{"table entry", twoShards + "clickhouse:\n  servers:\n    - {name: x, address: h:1}\ntables:\n  - {server: x, shard: a}\n  - {server: x, shrad: a}\n", "tables[1].shrad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.text)
			wantErr(t, err, `config: unknown key "`+tt.key+`"`)
		})
	}
}

func TestKeysIgnoreCase(t *testing.T) {
	c := mustLoad(t, twoShards+"Keeper:\n  TICK: 1s\n")
	if c.Keeper.Tick != time.Second {
		t.Errorf("tick = %v, want 1s", c.Keeper.Tick)
	}
	_, err := load(t, twoShards+"keeper:\n  tick: 1s\n  Tick: 3s\n")
	wantErr(t, err, `config: key "keeper.tick" repeats key "keeper.Tick"`)
}

func TestDecodeErrorsNameKey(t *testing.T) {
	tests := []struct {
		name, keeper, prefix string
	}{
		{"bad duration", "tick: often", "config: keeper.tick: time: invalid duration"},
		{"duration without unit", "tick: 2", "config: keeper.tick: 2 is not a duration"},
		{"bad int", "max_packet_bytes: lots", "config: keeper.max_packet_bytes: cannot parse"},
		{"bad bool", "fsync: maybe", "config: keeper.fsync: cannot parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, twoShards+"keeper:\n  "+tt.keeper+"\n")
			wantErrPrefix(t, err, tt.prefix)
		})
	}
}

func TestZeroDurationWithoutUnit(t *testing.T) {
	c := mustLoad(t, twoShards+"keeper:\n  max_session_timeout: 0\n")
	if c.Keeper.MaxSessionTimeout != 0 {
		t.Errorf("max_session_timeout = %v, want 0", c.Keeper.MaxSessionTimeout)
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.yaml")
	_, err := Load(path)
	wantErrPrefix(t, err, "config: open "+path)
}

func TestLoadBadYAML(t *testing.T) {
	path := writeFile(t, "shards: [\n")
	_, err := Load(path)
	wantErrPrefix(t, err, "config: "+path+": ")
}

func validCluster() *Cluster {
	return &Cluster{
		Shards: []Shard{
			{Name: "a", Members: []Member{
				{ID: "a1", ClientAddr: "127.0.0.1:21811", RaftAddr: "127.0.0.1:21911", DataDir: "/d/a1"},
				{ID: "a2", ClientAddr: "127.0.0.1:21812", RaftAddr: "127.0.0.1:21912", DataDir: "/d/a2"},
			}},
			{Name: "b", Members: []Member{
				{ID: "b1", ClientAddr: "127.0.0.1:21821", RaftAddr: "127.0.0.1:21921", DataDir: "/d/b1"},
			}},
		},
		Keeper: Default(),
	}
}

func TestValidateNamesKey(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Cluster)
		want   string
	}{
		{"no shards", func(c *Cluster) { c.Shards = nil },
			"config: shards: required: list at least one shard"},
		{"shard name", func(c *Cluster) { c.Shards[1].Name = "" },
			"config: shards[1].name: required"},
		{"members", func(c *Cluster) { c.Shards[1].Members = nil },
			"config: shards[1].members: required: list at least one member"},
		{"member id", func(c *Cluster) { c.Shards[0].Members[1].ID = "" },
			"config: shards[0].members[1].id: required"},
		{"client_addr", func(c *Cluster) { c.Shards[0].Members[1].ClientAddr = "" },
			"config: shards[0].members[1].client_addr: required"},
		{"raft_addr", func(c *Cluster) { c.Shards[0].Members[1].RaftAddr = "" },
			"config: shards[0].members[1].raft_addr: required"},
		{"data_dir", func(c *Cluster) { c.Shards[0].Members[1].DataDir = "" },
			"config: shards[0].members[1].data_dir: required"},
		{"duplicate shard name", func(c *Cluster) { c.Shards[1].Name = "a" },
			`config: shards[1].name: shard name "a" already used by shards[0].name`},
		{"duplicate member id in a shard", func(c *Cluster) { c.Shards[0].Members[1].ID = "a1" },
			`config: shards[0].members[1].id: member id "a1" already used by shards[0].members[0].id`},
		{"member in two shards", func(c *Cluster) { c.Shards[1].Members[0].ID = "a2" },
			`config: shards[1].members[0].id: member id "a2" already used by shards[0].members[1].id`},
		{"client_addr reused as client_addr", func(c *Cluster) { c.Shards[1].Members[0].ClientAddr = "127.0.0.1:21811" },
			`config: shards[1].members[0].client_addr: address "127.0.0.1:21811" already used by shards[0].members[0].client_addr`},
		{"http_addr reused as raft_addr", func(c *Cluster) { c.Shards[0].Members[0].HTTPAddr = "127.0.0.1:21921" },
			`config: shards[1].members[0].raft_addr: address "127.0.0.1:21921" already used by shards[0].members[0].http_addr`},
		{"raft_addr reused as client_addr", func(c *Cluster) { c.Shards[1].Members[0].RaftAddr = "127.0.0.1:21812" },
			`config: shards[1].members[0].raft_addr: address "127.0.0.1:21812" already used by shards[0].members[1].client_addr`},
		{"a loopback address under another name", func(c *Cluster) { c.Shards[1].Members[0].ClientAddr = "localhost:21811" },
			`config: shards[1].members[0].client_addr: address "127.0.0.1:21811" already used by shards[0].members[0].client_addr`},
		{"one member's two addrs", func(c *Cluster) { c.Shards[1].Members[0].RaftAddr = "127.0.0.1:21821" },
			`config: shards[1].members[0].raft_addr: address "127.0.0.1:21821" already used by shards[1].members[0].client_addr`},
		{"address without port", func(c *Cluster) { c.Shards[0].Members[0].ClientAddr = "127.0.0.1" },
			`config: shards[0].members[0].client_addr: "127.0.0.1" is not host:port: address 127.0.0.1: missing port in address`},
		{"address without host", func(c *Cluster) { c.Shards[0].Members[0].RaftAddr = ":21911" },
			`config: shards[0].members[0].raft_addr: ":21911" has no host`},
		{"address with bad port", func(c *Cluster) { c.Shards[0].Members[0].RaftAddr = "h:zk" },
			`config: shards[0].members[0].raft_addr: "h:zk": port must be a number from 1 to 65535`},
		{"address with port 0", func(c *Cluster) { c.Shards[0].Members[0].RaftAddr = "h:0" },
			`config: shards[0].members[0].raft_addr: "h:0": port must be a number from 1 to 65535`},
		{"tick zero", func(c *Cluster) { c.Keeper.Tick = 0 },
			"config: keeper.tick: must be at least 1ms, got 0s"},
		{"negative session timeout", func(c *Cluster) { c.Keeper.MinSessionTimeout = -time.Second },
			"config: keeper.min_session_timeout: must be at least 0s, got -1s"},
		{"min above max", func(c *Cluster) {
			c.Keeper.MinSessionTimeout, c.Keeper.MaxSessionTimeout = 10*time.Second, 5*time.Second
		},
			"config: keeper.min_session_timeout: 10s is above keeper.max_session_timeout 5s"},
		{"min above default max", func(c *Cluster) { c.Keeper.MinSessionTimeout = time.Minute },
			"config: keeper.min_session_timeout: 1m0s is above keeper.max_session_timeout 40s (20*keeper.tick)"},
		{"default min above max", func(c *Cluster) { c.Keeper.MaxSessionTimeout = time.Second },
			"config: keeper.min_session_timeout: 4s (2*keeper.tick) is above keeper.max_session_timeout 1s"},
		{"max_packet_bytes", func(c *Cluster) { c.Keeper.MaxPacketBytes = 0 },
			"config: keeper.max_packet_bytes: must be at least 1, got 0"},
		{"max_packet_bytes too big", func(c *Cluster) { c.Keeper.MaxPacketBytes = 32<<20 + 1 },
			"config: keeper.max_packet_bytes: must be at most 33554432 (a write is a Raft log entry, which every log store must read back), got 33554433"},
		{"snapshot_threshold", func(c *Cluster) { c.Keeper.SnapshotThreshold = 0 },
			"config: keeper.snapshot_threshold: must be at least 1, got 0"},
		{"trailing_logs", func(c *Cluster) { c.Keeper.TrailingLogs = 50 },
			"config: keeper.trailing_logs: must be at least 128, got 50"},
		{"log_stall_timeout", func(c *Cluster) { c.Keeper.LogStallTimeout = 10 * time.Millisecond },
			"config: keeper.log_stall_timeout: must be 0 (off) or at least keeper.heartbeat_timeout 1s, got 10ms"},
		{"max_batch_requests", func(c *Cluster) { c.Keeper.MaxBatchRequests = 0 },
			"config: keeper.max_batch_requests: must be at least 1, got 0"},
		{"max_watches_per_session", func(c *Cluster) { c.Keeper.MaxWatchesPerSession = 0 },
			"config: keeper.max_watches_per_session: must be at least 1, got 0"},
		{"max_watches_per_member", func(c *Cluster) { c.Keeper.MaxWatchesPerMember = 0 },
			"config: keeper.max_watches_per_member: must be at least 1, got 0"},
		{"max_watches_per_member below the session's", func(c *Cluster) { c.Keeper.MaxWatchesPerMember = 99_999 },
			"config: keeper.max_watches_per_member: 99999 is below keeper.max_watches_per_session 100000"},
		{"availability_zone", func(c *Cluster) { c.Keeper.AvailabilityZone = strings.Repeat("z", 257) },
			`config: keeper.availability_zone: must be UTF-8 of at most 256 bytes, got "` + strings.Repeat("z", 257) + `"`},
		{"max_queued_bytes_per_connection", func(c *Cluster) { c.Keeper.MaxQueuedBytesPerConnection = 2<<20 - 3 },
			"config: keeper.max_queued_bytes_per_connection: must be at least twice keeper.max_packet_bytes (2097150: a largest reply beside those before it), got 2097149"},
		{"snapshot_interval", func(c *Cluster) { c.Keeper.SnapshotInterval = 0 },
			"config: keeper.snapshot_interval: must be at least 5ms, got 0s"},
		{"commit_timeout", func(c *Cluster) { c.Keeper.CommitTimeout = 0 },
			"config: keeper.commit_timeout: must be at least 1ms, got 0s"},
		{"heartbeat_timeout", func(c *Cluster) { c.Keeper.HeartbeatTimeout = time.Millisecond },
			"config: keeper.heartbeat_timeout: must be at least 5ms, got 1ms"},
		{"lease above heartbeat", func(c *Cluster) { c.Keeper.LeaderLeaseTimeout = 2 * time.Second },
			"config: keeper.leader_lease_timeout: 2s is above keeper.heartbeat_timeout 1s"},
		{"election below heartbeat", func(c *Cluster) { c.Keeper.ElectionTimeout = 100 * time.Millisecond },
			"config: keeper.election_timeout: 100ms is below keeper.heartbeat_timeout 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validCluster()
			tt.change(c)
			wantErr(t, c.Validate(), tt.want)
		})
	}
}

func TestValidateAcceptsValid(t *testing.T) {
	if err := validCluster().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := validCluster()
	c.Shards[0].Members[0].DataDir = ""
	c.Keeper.Tick = 0
	err := c.Validate()
	wantErr(t, err, "config: shards[0].members[0].data_dir: required")
	wantErr(t, err, "config: keeper.tick: must be at least 1ms, got 0s")
}

func TestLoadValidates(t *testing.T) {
	_, err := load(t, twoShards+"keeper:\n  tick: 0s\n")
	wantErr(t, err, "config: keeper.tick: must be at least 1ms, got 0s")
}

func TestWriteLoadRoundTrip(t *testing.T) {
	custom := validCluster()
	custom.Keeper = Keeper{
		Tick: 500 * time.Millisecond, MinSessionTimeout: 3 * time.Second, MaxSessionTimeout: time.Minute,
		MaxPacketBytes: 4096, SnapshotThreshold: 10, SnapshotInterval: time.Second, TrailingLogs: 500,
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, CommitTimeout: time.Millisecond,
		MaxBatchRequests: 1, Fsync: false, TxDeadline: 2 * time.Second, LockWait: "delay", LockWaitMax: time.Second, GCPercent: 80,
		LogStallTimeout: 3 * time.Second, MaxWatchesPerSession: 10, MaxWatchesPerMember: 20, MaxQueuedBytesPerConnection: 8192,
		AvailabilityZone: "eu-1a",
	}
	tests := []struct {
		name string
		c    *Cluster
	}{
		{"defaults", validCluster()},
		{"every keeper key set", custom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cluster.yaml")
			if err := tt.c.Write(path); err != nil {
				t.Fatalf("Write: %v", err)
			}
			got, err := Load(path)
			require.NoError(t, err, "Load")
			if !reflect.DeepEqual(got, tt.c) {
				t.Errorf("Load(Write(c)) = %+v, want %+v", got, tt.c)
			}
		})
	}
}

// TestWriteKeepsSecretsFromOthers: a cluster file that holds a secret is
// written readable by its owner alone; one without is readable by all.
func TestWriteKeepsSecretsFromOthers(t *testing.T) {
	dir := t.TempDir()
	plain := validCluster()
	require.NoError(t, plain.Write(filepath.Join(dir, "plain.yaml")))
	secret := validCluster()
	secret.Security.ClusterSecret = "0123456789abcdef0123456789abcdef"
	require.NoError(t, secret.Write(filepath.Join(dir, "secret.yaml")))
	for name, want := range map[string]os.FileMode{"plain.yaml": 0o644, "secret.yaml": 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, want, fi.Mode().Perm(), name)
	}
}

func TestWriteOverwritesAndRefusesInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := validCluster().Write(path); err != nil {
		t.Fatal(err)
	}
	bad := validCluster()
	bad.Shards[0].Name = ""
	wantErr(t, bad.Write(path), "config: shards[0].name: required")
	if _, err := Load(path); err != nil {
		t.Fatalf("refused Write damaged the file: %v", err)
	}
	other := validCluster()
	other.Shards = other.Shards[:1]
	if err := other.Write(path); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil || len(got.Shards) != 1 {
		t.Fatalf("after overwrite: %+v, %v", got, err)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Fatalf("directory holds %v (%v), want only cluster.yaml", entries, err)
	}
}

func TestShardLookup(t *testing.T) {
	c := validCluster()
	s, err := c.Shard("b")
	if err != nil || s != &c.Shards[1] {
		t.Fatalf("Shard(b) = %p, %v; want %p", s, err, &c.Shards[1])
	}
	_, err = c.Shard("c")
	wantErr(t, err, `config: no shard "c"; known shards: a, b`)
}

func TestMemberLookup(t *testing.T) {
	c := validCluster()
	s, m, err := c.Member("a2")
	if err != nil || s != &c.Shards[0] || m != &c.Shards[0].Members[1] {
		t.Fatalf("Member(a2) = %p, %p, %v", s, m, err)
	}
	_, _, err = c.Member("c1")
	wantErr(t, err, `config: no member "c1"; known members: a1, a2, b1`)
	_, _, err = (&Cluster{}).Member("a1")
	wantErr(t, err, `config: no member "a1"; known members: (none)`)
}

func TestConnectString(t *testing.T) {
	c := validCluster()
	tests := []struct {
		shard *Shard
		want  string
	}{
		{&c.Shards[0], "127.0.0.1:21811,127.0.0.1:21812"},
		{&c.Shards[1], "127.0.0.1:21821"},
		{&Shard{}, ""},
	}
	for _, tt := range tests {
		if got := tt.shard.ConnectString(); got != tt.want {
			t.Errorf("ConnectString() = %q, want %q", got, tt.want)
		}
	}
}

func TestSessionTimeoutBounds(t *testing.T) {
	tests := []struct {
		name     string
		k        Keeper
		min, max time.Duration
	}{
		{"defaults from tick", Default(), 4 * time.Second, 40 * time.Second},
		{"explicit", Keeper{Tick: time.Second, MinSessionTimeout: 3 * time.Second, MaxSessionTimeout: 9 * time.Second},
			3 * time.Second, 9 * time.Second},
		{"only min set", Keeper{Tick: time.Second, MinSessionTimeout: 5 * time.Second}, 5 * time.Second, 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi := tt.k.SessionTimeoutBounds()
			if lo != tt.min || hi != tt.max {
				t.Errorf("SessionTimeoutBounds() = %v, %v; want %v, %v", lo, hi, tt.min, tt.max)
			}
		})
	}
}

func TestLockWaitMustBeKnown(t *testing.T) {
	_, err := load(t, twoShards+"keeper:\n  lock_wait: sometimes\n")
	wantErr(t, err, `config: keeper.lock_wait: must be reject or delay, got "sometimes"`)
}

// TestExampleIsValidAndShowsTheDefaults: the commented cluster file that
// `xkeeper config default` prints loads, and its keeper section is
// Default().
func TestExampleIsValidAndShowsTheDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	require.NoError(t, os.WriteFile(path, Example, 0o600))
	c, err := Load(path)
	require.NoError(t, err)
	assert.Equal(t, Default(), c.Keeper)
	assert.Len(t, c.Shards, 1)
	assert.Equal(t, DefaultFourLetterWords, c.Security.FourLetterWords)
}

// TestMaskedHidesEverySecret: Masked replaces the secrets and leaves the
// rest, and the original alone.
func TestMaskedHidesEverySecret(t *testing.T) {
	c := &Cluster{
		Security:   Security{ClusterSecret: "0123456789abcdef0123456789abcdef", Auth: "xkeeper:pw", SuperDigest: "super:h"},
		S3:         S3{AccessKey: "ak", SecretKey: "sk"},
		ClickHouse: ClickHouse{Servers: []ClickHouseServer{{Name: "ca", User: "u", Password: "p"}, {Name: "cb"}}},
	}
	m := c.Masked()
	assert.Equal(t, Masked, m.Security.ClusterSecret)
	assert.Equal(t, "xkeeper:"+Masked, m.Security.Auth)
	assert.Equal(t, "super:"+Masked, m.Security.SuperDigest, "the hash is a SHA-1 of the password")
	assert.Equal(t, Masked, m.S3.SecretKey)
	assert.Equal(t, "ak", m.S3.AccessKey)
	assert.Equal(t, Masked, m.ClickHouse.Servers[0].Password)
	assert.Empty(t, m.ClickHouse.Servers[1].Password, "no password stays none")
	assert.Equal(t, "p", c.ClickHouse.Servers[0].Password, "the original keeps its secrets")
	assert.Equal(t, "0123456789abcdef0123456789abcdef", c.Security.ClusterSecret)
}
