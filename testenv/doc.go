// Package testenv starts xkeeper shards, ClickHouse and ZooKeeper servers on loopback for tests and benchmarks, and injects faults.
package testenv
