// Package config reads and writes the shared xkeeper cluster file.
//
// One YAML file describes every keeper shard and its members, and the
// tunables every keeper process uses; every xkeeper command reads it:
//
//	shards:
//	  - name: a
//	    members:
//	      - {id: a1, client_addr: 127.0.0.1:21811, raft_addr: 127.0.0.1:21911, data_dir: /var/lib/xkeeper/a1}
//	keeper:
//	  tick: 2s
//	  fsync: true
//	clickhouse:
//	  servers:
//	    - {name: ch1, address: 127.0.0.1:9000, user: default, password: ""}
//	    - {name: ch2, address: 127.0.0.1:9001}
//	tables:
//	  - {server: ch1, shard: a}                               # every table of ch1
//	  - {server: ch1, database: logs, shard: b}               # every table of ch1's logs
//	  - {server: ch2, database: default, table: hits, shard: b}
//
// The clickhouse section names the ClickHouse servers (native protocol
// address, user, password) and tables says which keeper shard holds the
// metadata of each ClickHouse table, by table, by database or by server;
// the most specific entry wins (Cluster.TableShard).
//
// Load reads the file with viper. Every key of the keeper section may be
// overridden by an environment variable named XKEEPER_ followed by the key
// path in capitals with "." written as "_", for example
// XKEEPER_KEEPER_TICK=500ms overrides keeper.tick. Members cannot be set
// from the environment. Keys the package does not know are refused, at any
// depth, so a misspelt key is an error rather than a silently ignored
// setting. Durations are Go duration strings such as "500ms" or "2s".
//
// Later sections of the file (S3) will become further fields of Cluster;
// until then they are unknown keys.
package config
