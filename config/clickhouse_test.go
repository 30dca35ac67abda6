package config

import (
	"github.com/stretchr/testify/require"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

const withClickHouse = twoShards + `
clickhouse:
  servers:
    - {name: ch1, address: 127.0.0.1:9000, user: mover, password: s3cret}
    - {name: ch2, address: 127.0.0.1:9001}
tables:
  - {server: ch1, shard: a}
  - {server: ch1, database: logs, shard: b}
  - {server: ch2, database: default, table: hits, shard: b}
`

func TestLoadClickHouseAndTables(t *testing.T) {
	c := mustLoad(t, withClickHouse)
	wantServers := []ClickHouseServer{
		{Name: "ch1", Address: "127.0.0.1:9000", User: "mover", Password: "s3cret"},
		{Name: "ch2", Address: "127.0.0.1:9001"},
	}
	if !reflect.DeepEqual(c.ClickHouse.Servers, wantServers) {
		t.Errorf("servers = %+v, want %+v", c.ClickHouse.Servers, wantServers)
	}
	wantTables := []Table{
		{Server: "ch1", Shard: "a"},
		{Server: "ch1", Database: "logs", Shard: "b"},
		{Server: "ch2", Database: "default", Table: "hits", Shard: "b"},
	}
	if !reflect.DeepEqual(c.Tables, wantTables) {
		t.Errorf("tables = %+v, want %+v", c.Tables, wantTables)
	}
	// Both sections are optional, and may be written empty.
	for _, text := range []string{twoShards, twoShards + "clickhouse:\ntables:\n", twoShards + "clickhouse: {servers: []}\ntables: []\n"} {
		c := mustLoad(t, text)
		if len(c.ClickHouse.Servers) != 0 || len(c.Tables) != 0 {
			t.Errorf("%q: clickhouse %+v, tables %+v", text, c.ClickHouse, c.Tables)
		}
	}
}

func TestClickHouseKeysIgnoreCase(t *testing.T) {
	_, err := load(t, twoShards+"clickhouse:\n  servers:\n    - {name: x, Name: y, address: h:1}\n")
	wantErr(t, err, `config: key "clickhouse.servers[0].name" repeats key "clickhouse.servers[0].Name"`)
}

func TestClickHouseDecodeErrorsNameKey(t *testing.T) {
	_, err := load(t, twoShards+"clickhouse:\n  servers: seven\n")
	wantErrPrefix(t, err, "config: clickhouse.servers[0]: expected a map")
	_, err = load(t, twoShards+"tables:\n  - [a, b]\n")
	wantErrPrefix(t, err, "config: tables[0]: ")
}

func clusterWithClickHouse() *Cluster {
	c := validCluster()
	c.ClickHouse.Servers = []ClickHouseServer{
		{Name: "ch1", Address: "127.0.0.1:9000", User: "u", Password: "p"},
		{Name: "ch2", Address: "127.0.0.1:9001"},
	}
	c.Tables = []Table{
		{Server: "ch1", Shard: "a"},
		{Server: "ch1", Database: "logs", Shard: "b"},
		{Server: "ch1", Database: "logs", Table: "hits", Shard: "a"},
		{Server: "ch2", Database: "default", Table: "hits", Shard: "b"},
	}
	return c
}

func TestValidateClickHouseNamesKey(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Cluster)
		want   string
	}{
		{"server name", func(c *Cluster) { c.ClickHouse.Servers[1].Name = "" },
			"config: clickhouse.servers[1].name: required"},
		{"duplicate server name", func(c *Cluster) { c.ClickHouse.Servers[1].Name = "ch1" },
			`config: clickhouse.servers[1].name: server name "ch1" already used by clickhouse.servers[0].name`},
		{"colon in server name", func(c *Cluster) { c.ClickHouse.Servers[1].Name = "ch:2" },
			`config: clickhouse.servers[1].name: "ch:2": a server name may not contain ':' or blanks`},
		{"address", func(c *Cluster) { c.ClickHouse.Servers[0].Address = "" },
			"config: clickhouse.servers[0].address: required"},
		{"address without port", func(c *Cluster) { c.ClickHouse.Servers[0].Address = "ch1.example" },
			`config: clickhouse.servers[0].address: "ch1.example" is not host:port: address ch1.example: missing port in address`},
		{"duplicate address", func(c *Cluster) { c.ClickHouse.Servers[1].Address = "127.0.0.1:9000" },
			`config: clickhouse.servers[1].address: address "127.0.0.1:9000" already used by clickhouse.servers[0].address`},
		{"address of a keeper member", func(c *Cluster) { c.ClickHouse.Servers[1].Address = "127.0.0.1:21911" },
			`config: clickhouse.servers[1].address: address "127.0.0.1:21911" already used by shards[0].members[0].raft_addr`},
		{"table server", func(c *Cluster) { c.Tables[0].Server = "" },
			"config: tables[0].server: required"},
		{"unknown server", func(c *Cluster) { c.Tables[3].Server = "ch3" },
			`config: tables[3].server: unknown server "ch3"; clickhouse.servers has ch1, ch2`},
		{"unknown server, none known", func(c *Cluster) { c.ClickHouse.Servers = nil },
			`config: tables[0].server: unknown server "ch1"; clickhouse.servers has (none)`},
		{"table shard", func(c *Cluster) { c.Tables[1].Shard = "" },
			"config: tables[1].shard: required"},
		{"unknown shard", func(c *Cluster) { c.Tables[2].Shard = "z" },
			`config: tables[2].shard: unknown shard "z"; shards has a, b`},
		{"table without database", func(c *Cluster) { c.Tables[3].Database = "" },
			"config: tables[3].database: required with table"},
		{"same table twice", func(c *Cluster) { c.Tables[3] = Table{Server: "ch1", Database: "logs", Table: "hits", Shard: "b"} },
			"config: tables[3]: ch1:logs.hits already assigned by tables[2]"},
		{"same database twice", func(c *Cluster) { c.Tables[3] = Table{Server: "ch1", Database: "logs", Shard: "a"} },
			"config: tables[3]: ch1:logs.* already assigned by tables[1]"},
		{"same server twice", func(c *Cluster) { c.Tables[3] = Table{Server: "ch1", Shard: "b"} },
			"config: tables[3]: ch1:* already assigned by tables[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clusterWithClickHouse()
			tt.change(c)
			wantErr(t, c.Validate(), tt.want)
		})
	}
	if err := clusterWithClickHouse().Validate(); err != nil {
		t.Errorf("valid cluster: %v", err)
	}
}

func TestLoadValidatesTables(t *testing.T) {
	_, err := load(t, withClickHouse+"  - {server: ch9, shard: c}\n")
	wantErr(t, err, `config: tables[3].server: unknown server "ch9"; clickhouse.servers has ch1, ch2`)
	wantErr(t, err, `config: tables[3].shard: unknown shard "c"; shards has a, b`)
}

func TestTableShard(t *testing.T) {
	c := clusterWithClickHouse()
	tests := []struct {
		server, db, table, shard string
	}{
		{"ch1", "default", "t", "a"}, // by server
		{"ch1", "logs", "t", "b"},    // by database
		{"ch1", "logs", "hits", "a"}, // by table
		{"ch2", "default", "hits", "b"},
	}
	for _, tt := range tests {
		s, err := c.TableShard(tt.server, tt.db, tt.table)
		if err != nil || s.Name != tt.shard {
			t.Errorf("TableShard(%s, %s, %s) = %v, %v; want shard %s", tt.server, tt.db, tt.table, s, err, tt.shard)
		}
	}
	_, err := c.TableShard("ch2", "default", "other")
	wantErr(t, err, "config: no shard for table ch2:default.other: no entry of tables names it, its database or its server")
	_, err = c.TableShard("ch3", "default", "hits")
	wantErrPrefix(t, err, "config: no shard for table ch3:default.hits")
}

func TestClickHouseServerLookup(t *testing.T) {
	c := clusterWithClickHouse()
	s, err := c.ClickHouseServer("ch2")
	if err != nil || s != &c.ClickHouse.Servers[1] {
		t.Fatalf("ClickHouseServer(ch2) = %p, %v", s, err)
	}
	_, err = c.ClickHouseServer("ch3")
	wantErr(t, err, `config: no ClickHouse server "ch3"; known servers: ch1, ch2`)
	_, err = validCluster().ClickHouseServer("ch1")
	wantErr(t, err, `config: no ClickHouse server "ch1"; known servers: (none)`)
}

func TestWriteLoadRoundTripClickHouse(t *testing.T) {
	want := clusterWithClickHouse()
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	if err := want.Write(path); err != nil {
		t.Fatalf("Write: %v", err)
	}
	got, err := Load(path)
	require.NoError(t, err, "Load")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load(Write(c)) = %+v, want %+v", got, want)
	}
	bad := clusterWithClickHouse()
	bad.Tables[0].Shard = "z"
	wantErr(t, bad.Write(path), `config: tables[0].shard: unknown shard "z"; shards has a, b`)
}

func TestLoadS3(t *testing.T) {
	c := mustLoad(t, twoShards+"s3: {endpoint: 127.0.0.1:9100, bucket: b, prefix: parts/, access_key: k, secret_key: s, orphan_grace: 10m}\n")
	want := S3{Endpoint: "127.0.0.1:9100", Bucket: "b", Prefix: "parts/", AccessKey: "k", SecretKey: "s", OrphanGrace: 10 * time.Minute}
	if c.S3 != want || c.S3.Grace() != 10*time.Minute {
		t.Errorf("s3 = %+v, want %+v", c.S3, want)
	}
	if g := mustLoad(t, twoShards).S3.Grace(); g != time.Hour {
		t.Errorf("default grace %v, want 1h", g)
	}
	_, err := load(t, twoShards+"s3: {endpoint: nowhere, orphan_grace: -1s, acces_key: k}\n")
	wantErr(t, err, `config: unknown key "s3.acces_key"`)
	_, err = load(t, twoShards+"s3: {endpoint: nowhere, orphan_grace: -1s}\n")
	wantErr(t, err, `config: s3.endpoint: "nowhere": want host:port`)
	wantErr(t, err, `config: s3.bucket: required`)
	wantErr(t, err, `config: s3.prefix: required`)
	wantErr(t, err, `config: s3.orphan_grace: must not be negative, got -1s`)
}
